"""The SSH executor: argv and quoting (pure), then for real against sshd in a namespace "host".

The lab half uses tests/support/ssh_lab.py: lhssh-<pid>-a runs the ssh client (SshExecutor(via=NetnsExecutor)),
lhssh-<pid>-b is the "host": sshd in its own pid namespace, so it is that host's init and a remote
`ps` sees only the host. Keys, known_hosts and sshd_config live in the test's tmp dir; the run
leaves nothing behind.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from ssh_lab import lab_skip_reason, ssh_lab

from longhaul.hardware.executors.process import CommandError, NetnsExecutor, ProcessTable, wait_until
from longhaul.hardware.executors.ssh import SshExecutor
from longhaul.hardware.executors.ssh_masters import LONG_LIVED_SESSIONS
from longhaul.hardware.executors.ssh_remote import MARKER, remote_command

TRICKY = ["a b", "it's", 'say "hi"', "$HOME", "${PATH}", "a;b", "x && y", "`id`", "$(id)", "*", "",
          "back\\slash", "tab\there", "new\nline", "--", "-n", "%s", "é ü", "!", "~", "'", '"']


def executor(tmp_path: Path, **kw) -> SshExecutor:
    base = dict(host="10.201.0.2", user="root", key=tmp_path / "id", known_hosts=tmp_path / "kh", port=2222)
    base.update(kw)
    return SshExecutor("h", ProcessTable(), **base)


# -- pure: argv and quoting ----------------------------------------------------------------------

def test_ssh_argv_is_strict_keys_only_and_ends_in_one_command_string(tmp_path):
    argv = executor(tmp_path).wrap(["printf", "%s\n", "a b"])
    assert argv[0] == "ssh" and argv[-3:-1] == ["root@10.201.0.2", "--"]
    opts = {argv[i + 1] for i, a in enumerate(argv) if a == "-o"}
    assert {"BatchMode=yes", "StrictHostKeyChecking=yes", f"UserKnownHostsFile={tmp_path / 'kh'}",
            "GlobalKnownHostsFile=/dev/null", "IdentitiesOnly=yes", "PasswordAuthentication=no",
            "KbdInteractiveAuthentication=no", "ControlMaster=no"} <= opts
    assert argv[argv.index("-i") + 1] == str(tmp_path / "id") and argv[argv.index("-p") + 1] == "2222"
    assert "accept-new" not in " ".join(argv)


def test_trust_on_first_use_only_when_asked(tmp_path):
    argv = executor(tmp_path, trust_on_first_use=True).wrap(["true"])
    assert "StrictHostKeyChecking=accept-new" in argv and "StrictHostKeyChecking=yes" not in argv


def test_paths_are_escaped_for_ssh_and_via_prefixes_the_client(tmp_path):
    ex = executor(tmp_path, key=Path("/k dir/id%1"), known_hosts=Path("/x/kh"), ssh_config="/dev/null",
                  via=NetnsExecutor("client", "lhssh-x-a", ProcessTable()))
    argv = ex.wrap(["true"])
    assert argv[:5] == ["ip", "netns", "exec", "lhssh-x-a", "ssh"]
    assert argv[argv.index("-F") + 1] == "/dev/null"
    assert argv[argv.index("-i") + 1] == '"/k dir/id%%1"'     # ssh splits on spaces, expands %


def test_argv_is_quoted_once_and_reaches_exec_unchanged():
    for watch in (True, False):
        words = shlex.split(remote_command(["printf", "%s\n", *TRICKY], watch=watch))
        assert words[:3] == ["exec", "/bin/sh", "-c"] and words[4:] == ["longhaul", "printf", "%s\n", *TRICKY]
        subprocess.run(["sh", "-n", "-c", words[3]], check=True)       # the script parses


def test_a_login_shell_running_the_string_gets_the_exact_arguments():
    # what sshd does with the string: `$SHELL -c STRING` (the plain form: no watcher to leave behind)
    res = subprocess.run(["sh", "-c", remote_command(["printf", "%s\n", *TRICKY], watch=False)],
                         capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    assert res.returncode == 0 and res.stdout == "".join(a + "\n" for a in TRICKY)


def fake_ssh(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fake-ssh"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def test_start_takes_the_announced_group_off_stderr(tmp_path):
    ssh = fake_ssh(tmp_path, f"echo early >&2; echo '{MARKER} 4242' >&2; echo out; echo late >&2; exit 3")
    ex = executor(tmp_path, ssh=ssh)
    proc = ex.start(["x"], stdout=tmp_path / "o", stderr=tmp_path / "e")
    assert proc.remote_pgid == 4242 and proc.wait(10) == 3
    assert proc.read_stdout() == "out\n" and proc.read_stderr() == "early\nlate\n"
    assert ex.procs.pids() == []


def test_a_refused_connection_fails_start_and_run_with_ssh_s_message(tmp_path):
    ssh = fake_ssh(tmp_path, "echo 'Host key verification failed.' >&2; exit 255")
    ex = executor(tmp_path, ssh=ssh)
    with pytest.raises(CommandError, match="Host key verification failed") as info:
        ex.start(["sleep", "300"])
    assert info.value.returncode == 255
    with pytest.raises(CommandError, match="Host key verification failed"):
        ex.run(["true"])
    assert ex.run(["true"], check=False).returncode == 255
    with pytest.raises(CommandError, match="not found"):
        executor(tmp_path, ssh=str(tmp_path / "no-such-ssh")).run(["true"])


# -- lab: real sshd on a namespace host (tests/support/ssh_lab.py) ----------------------------------------

@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    reason = lab_skip_reason()
    if reason:
        pytest.skip(reason)
    with ssh_lab(tmp_path_factory.mktemp("sshlab"), "lhssh", "10.201.0") as lab:
        yield lab


lab_test = pytest.mark.lab


@lab_test
def test_run_returns_output_exit_codes_and_input(lab):
    ex = lab.executor()
    res = ex.run(["printf", "%s\n", *TRICKY])
    assert res.returncode == 0 and res.stdout == "".join(a + "\n" for a in TRICKY) and res.stderr == ""
    res = ex.run(["sh", "-c", "echo oops >&2; exit 3"], check=False)
    assert (res.returncode, res.stdout, res.stderr) == (3, "", "oops\n")
    with pytest.raises(CommandError) as info:
        ex.run(["sh", "-c", "exit 4"])
    assert info.value.returncode == 4
    res = ex.run(["sh", "-c", "cat; echo done >&2"], input="line 1\n$HOME 'q'\n")
    assert res.stdout == "line 1\n$HOME 'q'\n" and res.stderr == "done\n"    # marker removed
    assert ex.run(["ps", "-o", "pid=", "-p", "1"]).stdout.strip() == "1"     # the host's own pids
    lab.assert_clean()


@lab_test
def test_host_keys_are_checked_strictly_unless_trust_on_first_use(lab):
    empty = lab.tmp / "kh-empty"
    empty.write_text("")
    with pytest.raises(CommandError, match="Host key verification failed") as info:
        lab.executor(known_hosts=empty).run(["true"])
    assert info.value.returncode == 255 and empty.read_text() == ""
    with pytest.raises(CommandError, match="Host key verification failed"):
        lab.executor(known_hosts=empty).start(["sleep", "300"])
    assert lab.executor(known_hosts=empty, trust_on_first_use=True).run(["echo", "ok"]).stdout == "ok\n"
    assert lab.host_key_line.split()[2] in empty.read_text()                 # recorded on first use
    assert lab.executor(known_hosts=empty).run(["true"]).returncode == 0     # and strict from then on
    wrong = lab.tmp / "kh-wrong"
    other = (lab.tmp / "user_key.pub").read_text().split()
    wrong.write_text(f"[10.201.0.2]:2222 {other[0]} {other[1]}\n")
    with pytest.raises(CommandError):                                        # a changed key: never
        lab.executor(known_hosts=wrong, trust_on_first_use=True).run(["true"])
    lab.assert_clean()


@lab_test
def test_stop_ends_the_remote_group_and_leaves_nothing(lab):
    ex = lab.executor()
    proc = ex.start(["sh", "-c", "sleep 301 & sleep 302"], label="sleeper")
    assert proc.remote_pgid and ex.procs.pids() == [proc.pid]
    assert lab.remote_has("sleep 301") and lab.remote_has("sleep 302")
    t0 = time.monotonic()
    proc.stop(term_timeout=10)
    assert time.monotonic() - t0 < 8 and proc.poll() is not None
    lab.assert_clean()


@lab_test
def test_sigint_reaches_the_remote_tool(lab):
    # fping is stopped with SIGINT so it prints its summary: the tool must not ignore it remotely
    proc = lab.executor().start(["sleep", "300"])
    t0 = time.monotonic()
    proc.stop(term_timeout=10, sig=signal.SIGINT)
    assert time.monotonic() - t0 < 8        # not the KILL after term_timeout
    lab.assert_clean()


@lab_test
def test_a_dead_controller_or_client_still_leaves_nothing(lab):
    ex = lab.executor()
    proc = ex.start(["sleep", "303"])
    os.killpg(proc.pid, signal.SIGKILL)      # the local ssh client dies without a word
    proc.popen.wait(10)
    lab.assert_clean()
    proc = ex.start(["sleep", "304"])
    proc.popen.stdin.close()                 # what the controller's death does to the client
    lab.assert_clean()
    proc.wait(10)


@lab_test
def test_a_timed_out_run_is_ended_remotely(lab):
    ex = lab.executor()
    with pytest.raises(CommandError, match="timed out"):
        ex.run(["sleep", "305"], timeout=2)
    lab.assert_clean()


@lab_test
def test_start_files_and_cleanup(lab):
    ex = lab.executor()
    proc = ex.start(["sh", "-c", "echo out; echo err >&2; exit 4"], stdout=lab.tmp / "o", stderr=lab.tmp / "e")
    assert proc.wait(20) == 4
    assert proc.read_stdout() == "out\n" and proc.read_stderr() == "err\n"
    procs = [ex.start(["sleep", str(310 + i)]) for i in range(3)]
    assert len({p.remote_pgid for p in procs}) == 3
    ex.cleanup(term_timeout=5)
    assert all(p.poll() is not None for p in procs) and ex.started() == []
    lab.assert_clean()


@lab_test
def test_concurrent_runs(lab):
    ex = lab.executor()
    results: dict[int, str] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            results[i] = ex.run(["sh", "-c", 'sleep 0.5; echo "$1"', "sh", f"thread {i}"], timeout=30).stdout
        except BaseException as exc:   # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and results == {i: f"thread {i}\n" for i in range(4)}
    assert time.monotonic() - t0 < 4 * 0.5 + 8          # they overlapped (each sleeps 0.5 s)
    lab.assert_clean()


@lab_test
def test_short_commands_share_one_connection_and_long_ones_another(lab):
    def accepted() -> int:          # sshd logs each authenticated connection once
        return (lab.tmp / "sshd-b.log").read_text().count("Accepted publickey")
    ex = lab.executor()
    before = accepted()
    assert [ex.run(["echo", str(i)]).stdout for i in range(5)] == [f"{i}\n" for i in range(5)]
    assert lab.executor().run(["true"]).returncode == 0       # another executor, the same host and trust
    assert accepted() == before + 1
    # long-lived processes: a second shared connection (never holding back the short commands')
    # while it has a session free, then a connection each
    procs = [ex.start(["sleep", "320"]) for _ in range(LONG_LIVED_SESSIONS)]
    assert accepted() == before + 2
    procs.append(ex.start(["sleep", "321"]))
    assert accepted() == before + 3
    assert [ex.run(["echo", "x"]).stdout for _ in range(3)] == ["x\n"] * 3 and accepted() == before + 3
    os.killpg(procs[0].pid, signal.SIGKILL)      # a shared session's client dies: its tool ends with it
    procs[0].popen.wait(10)
    wait_until(lambda: sum(line.split(" ", 1)[1] == "sleep 320" for line in lab.leftovers(lab.ns_b)) == LONG_LIVED_SESSIONS - 1,
               10, 0.1, what="the killed client's tool to end")
    for proc in procs[1:]:
        proc.stop(term_timeout=5)
    procs = [ex.start(["sleep", "322"])]          # its sessions given back: shared again
    assert accepted() == before + 3
    procs[0].stop(term_timeout=5)
    strict = lab.tmp / "kh-empty-shared"
    strict.write_text("")
    with pytest.raises(CommandError, match="Host key verification failed"):
        lab.executor(known_hosts=strict).run(["true"])        # never rides on what another executor trusted
    assert lab.executor(share=False).run(["true"]).returncode == 0 and accepted() == before + 4
    lab.assert_clean()


@lab_test
def test_more_commands_at_once_than_sshd_allows_sessions_per_connection(lab):
    ex = lab.executor()                  # sshd's MaxSessions is 10: 16 at once still all run
    with ThreadPoolExecutor(16) as pool:
        outs = list(pool.map(lambda i: ex.run(["sh", "-c", 'sleep 0.3; echo "$1"', "sh", str(i)]).stdout, range(16)))
    assert outs == [f"{i}\n" for i in range(16)]
    lab.assert_clean()
