"""A real sshd on a namespace "host", shared by the SSH lab tests (test_ssh_executor, test_readiness).

Two namespaces joined by a veth pair: <prefix>-<pid>-a runs the ssh client (SshExecutor with
via=NetnsExecutor), <prefix>-<pid>-b is the "host": sshd in its own pid namespace, so it is that
host's init (reaps orphans, as init does on a real machine) and a remote `ps` sees only the host.
Keys, known_hosts and sshd_config live in the test's tmp dir; ssh_lab() leaves nothing behind.
Each test module passes its own prefix and /24 so that modules never collide.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

from longhaul.hardware.executors.process import NetnsExecutor, ProcessTable, wait_until
from longhaul.hardware.executors.ssh import SshExecutor
from longhaul.hardware.executors.ssh_masters import MASTERS

SHARED = re.compile(r"^\d+ sshd: \S+@notty$")           # the host's half of a shared connection
MUX = re.compile(r"^\d+ ssh: /tmp/lh-ssh-\S+ \[mux\]$")   # a master (ssh_masters.py)


def lab_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, sshd)"
    if not Path("/usr/sbin/sshd").exists():
        return "sshd is not installed (openssh-server; make setup installs it)"
    for tool in ("ssh", "ssh-keygen", "ip", "unshare", "ss"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    return None


def sh(*argv, **kw):
    return subprocess.run([str(a) for a in argv], check=True, capture_output=True, text=True, timeout=30, **kw)


class Lab:
    def __init__(self, tmp: Path, ns_a: str, ns_b: str, client_ip: str, host_ip: str, ports: tuple[int, ...]):
        self.tmp, self.ns_a, self.ns_b = tmp, ns_a, ns_b
        self.client_ip, self.host_ip, self.ports = client_ip, host_ip, ports
        self.sshd: subprocess.Popen | None = None
        self.host_key_line = ""          # known_hosts line of the first port

    def executor(self, known_hosts: Path | None = None, **kw) -> SshExecutor:
        procs = ProcessTable()
        return SshExecutor("B", procs, host=self.host_ip, user="root", key=self.tmp / "user_key",
                           known_hosts=known_hosts or self.tmp / "known_hosts", port=self.ports[0],
                           ssh_config="/dev/null", via=NetnsExecutor("A", self.ns_a, procs), grace_s=2, **kw)

    def leftovers(self, ns: str) -> list[str]:
        return host_leftovers(ns, self.sshd if ns == self.ns_b else None)

    def assert_clean(self, timeout: float = 8.0) -> None:
        """Nothing but sshd on the host and nothing in the client namespace, within the grace:
        first with the shared connections still up (only their masters and sshd's halves of them
        may remain, so no tool outlived its session), then after closing them, as a run's end does."""
        def only_shared_connections() -> bool:
            return (all(SHARED.search(line) for line in self.leftovers(self.ns_b))
                    and all(MUX.search(line) for line in self.leftovers(self.ns_a)))
        for check in (only_shared_connections, lambda: not self.leftovers(self.ns_b) and not self.leftovers(self.ns_a)):
            try:
                wait_until(check, timeout, interval=0.1, what="remote leftovers to go")
            except TimeoutError:
                raise AssertionError(f"left behind: b={self.leftovers(self.ns_b)} a={self.leftovers(self.ns_a)}") from None
            MASTERS.close_all()

    def remote_has(self, text: str) -> bool:
        return any(text in line for line in self.leftovers(self.ns_b))


@contextlib.contextmanager
def ssh_lab(tmp: Path, prefix: str, net: str, ports: tuple[int, ...] = (2222,)):
    """sshd on <net>.2 (ports), the client namespace on <net>.1; known_hosts holds the first port."""
    ns_a, ns_b = f"{prefix}-{os.getpid()}-a", f"{prefix}-{os.getpid()}-b"
    client_ip, host_ip = f"{net}.1", f"{net}.2"
    created: list[str] = []
    made_privsep = False
    lab = Lab(tmp, ns_a, ns_b, client_ip, host_ip, tuple(ports))
    try:
        for ns in (ns_a, ns_b):
            sh("ip", "netns", "add", ns)
            created.append(ns)
        sh("ip", "link", "add", "va", "netns", ns_a, "type", "veth", "peer", "name", "vb", "netns", ns_b)
        for ns, dev, addr in ((ns_a, "va", f"{client_ip}/24"), (ns_b, "vb", f"{host_ip}/24")):
            sh("ip", "-n", ns, "addr", "add", addr, "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        make_keys(tmp)
        lab.host_key_line = known_hosts_line(tmp, host_ip, ports[0])
        (tmp / "known_hosts").write_text(lab.host_key_line)
        made_privsep = ensure_privsep()
        lab.sshd = start_sshd(tmp, ns_b, "b", host_ip, ports)
        yield lab
    finally:
        if lab.sshd is not None:
            stop_sshd(lab.sshd)
        for ns in created:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        if made_privsep:
            try:
                os.rmdir("/run/sshd")
            except OSError:
                pass


# -- several "hosts" (tests/system/test_hosts_lab.py): one sshd per namespace, shared keys --------------

def make_keys(tmp: Path) -> None:
    """host_key (every host presents it) and user_key (authorized everywhere) in tmp."""
    for name in ("host_key", "user_key"):
        if not (tmp / name).exists():
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", tmp / name)
    (tmp / "authorized_keys").write_text((tmp / "user_key.pub").read_text())


def known_hosts_line(tmp: Path, address: str, port: int = 22) -> str:
    key_type, key_b64 = (tmp / "host_key.pub").read_text().split()[:2]
    where = address if port == 22 else f"[{address}]:{port}"
    return f"{where} {key_type} {key_b64}\n"


def start_sshd(tmp: Path, ns: str, name: str, address: str, port: int | tuple[int, ...] = 22) -> subprocess.Popen:
    """sshd on address:port(s) in namespace ns, as that host's init (own pid namespace); the caller
    stops it with stop_sshd. /run/sshd must exist (ensure_privsep)."""
    ports = (port,) if isinstance(port, int) else tuple(port)
    port_lines = "".join(f"Port {p}\n" for p in ports)
    config = tmp / f"sshd_config-{name}"
    config.write_text(f"""\
ListenAddress {address}
{port_lines}HostKey {tmp}/host_key
AuthorizedKeysFile {tmp}/authorized_keys
PidFile {tmp}/sshd-{name}.pid
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
MaxStartups 30
""")
    log = open(tmp / f"sshd-{name}.log", "w")
    proc = subprocess.Popen(
        ["ip", "netns", "exec", ns, "unshare", "--pid", "--fork", "--kill-child", "--mount-proc",
         "/usr/sbin/sshd", "-D", "-e", "-f", str(config)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()

    def listening() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd {name} exited: {(tmp / f'sshd-{name}.log').read_text()}")
        out = subprocess.run(["ip", "netns", "exec", ns, "ss", "-Hltn"], capture_output=True, text=True,
                             check=False).stdout
        return all(f"{address}:{p}" in out for p in ports)

    wait_until(listening, 15, interval=0.1, what=f"sshd {name} to listen")
    return proc


def stop_sshd(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)          # --kill-child takes the host's pid namespace
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def ensure_privsep() -> bool:
    """sshd's privilege-separation directory; True when we made it (the caller removes it)."""
    if Path("/run/sshd").exists():
        return False
    os.mkdir("/run/sshd", 0o755)
    return True


def host_leftovers(ns: str, sshd: subprocess.Popen | None) -> list[str]:
    """Live processes in ns other than unshare (the pid we started) and its child, the sshd
    listener: the host's init."""
    keep: set[int] = set()
    if sshd is not None and sshd.poll() is None:
        keep = {sshd.pid, *map(int, Path(f"/proc/{sshd.pid}/task/{sshd.pid}/children").read_text().split())}
    found = []
    listed = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, check=False).stdout
    for pid in map(int, listed.split()):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except (OSError, IndexError):
            continue
        if pid not in keep and state != "Z":
            found.append(f"{pid} {cmd}")
    return found
