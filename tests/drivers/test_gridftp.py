"""GridFTP driver (drivers/gridftp.py): argv builders, the parser on real captured outputs
(tests/data/gridftp/README.md says how they were captured) and a namespace lab run.

Lab, dev VM (2 shared cores), a -> r -> b, tbf 100 Mbit toward b, no added delay, CCA bbr (the
namespace default; globus-url-copy cannot choose one). Three runs:
  memory-to-memory 60 MB with -p 8: 60000000 bytes in 5.08-5.26 s (91.2-94.5 Mb/s); the tcp_info
  probe keyed by the burst's port saw all 8 data streams and 99.4 % of the bytes; whole seconds
  after the first 91-96 Mb/s. The tool's own timeline: one interval (markers come every 5 s).
  disk-to-disk 20 MB with -p 4: 88-94 Mb/s; source and received files removed afterwards.
"""
from __future__ import annotations

import itertools
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path, PurePosixPath

import pytest
from lab_support import requires_lab
from netns_wiring import routed

from longhaul.collectors.live.socket_sampler import parse_probe_line
from longhaul.drivers import gridftp
from longhaul.drivers.gridftp import GridFTP, parse
from longhaul.drivers.tool import BurstSpec, listening, listening_ports

DATA = Path(__file__).parents[1] / "data" / "gridftp"


def _spec(**kw) -> BurstSpec:
    base = {"receiver": "D1", "port": 5301, "duration_s": None, "bytes": 60_000_000, "streams": 8,
            "workdir": PurePosixPath("/w/f-b0")}
    return BurstSpec(**{**base, **kw})


def _data(name: str) -> str:
    return (DATA / name).read_text()


# --------------------------------------------------------------------------- argv


def test_tool_shape():
    tool = GridFTP()
    assert tool.name == "gridftp" and tool.shared_servers is False
    assert tool.executables == ("globus-gridftp-server", "globus-url-copy")


def test_server_argv_binds_receiver_and_pins_data_port():
    spec = _spec()
    server = GridFTP().server(spec)
    argv = server.argv
    assert argv[:5] == ["sh", "-c", gridftp._MKDIR_EXEC, "globus-gridftp-server", "/w/f-b0"]
    cmd = argv[5:]
    assert cmd[:3] == ["env", "GLOBUS_HOSTNAME=D1", "globus-gridftp-server"]
    pairs = dict(itertools.pairwise(cmd))
    assert pairs["-p"] == "15301"                         # control: port + offset
    assert pairs["-port-range"] == "5301,5301"            # data: the burst's own port
    assert pairs["-dc-default"] == "tcp:reuse=true"       # ... even while it is in TIME_WAIT
    assert pairs["-control-interface"] == "D1" and pairs["-data-interface"] == "D1"
    assert pairs["-anonymous-user"] == "root" and "-aa" in cmd and "-allow-root" in cmd
    assert pairs["-c"] == "/dev/null" and pairs["-logfile"] == "/dev/stdout"
    assert pairs["-log-transfer"] == "/w/f-b0/gridftp-transfer-5301.log"
    assert "transfer" in pairs["-log-level"]
    assert server.ready == listening(15301)
    assert server.cleanup == []


def test_server_options_override_and_disk_cleanup():
    spec = _spec(storage="disk", options={"gridftp_control_port": 40000, "gridftp_bind": "10.9.9.9"})
    server = GridFTP().server(spec)
    pairs = dict(itertools.pairwise(server.argv))
    assert pairs["-p"] == "40000" and pairs["-control-interface"] == "10.9.9.9"
    assert "GLOBUS_HOSTNAME=10.9.9.9" in server.argv
    assert server.ready == listening(40000)
    assert server.cleanup == [["rm", "-f", "/w/f-b0/gridftp-recv-5301.dat"]]


def test_client_memory_bytes():
    argv = GridFTP().client(_spec(window_bytes=4_194_304))
    assert argv == ["globus-url-copy", "-vb", "-fast", "-p", "8", "-tcp-bs", "4194304",
                    "-len", "60000000", "file:///dev/zero", "ftp://D1:15301/dev/null"]


@pytest.mark.parametrize("duration, arg", [(6, "6"), (5.4, "5"), (5.5, "6"), (0.2, "1")])
def test_client_memory_duration(duration, arg):
    argv = GridFTP().client(_spec(duration_s=duration, bytes=None, streams=16))
    assert argv == ["globus-url-copy", "-vb", "-fast", "-p", "16", "-t", arg,
                    "file:///dev/zero", "ftp://D1:15301/dev/null"]


def test_disk_file_is_written_before_the_clock_and_sent_by_the_client():
    spec = _spec(storage="disk", bytes=40_000_000, workdir=PurePosixPath("/w/a b"))
    before, after = GridFTP().prepare(spec)
    assert before == [["sh", "-c", gridftp._DISK_WRITE, "sh", "/w/a b/gridftp-src-5301.dat", "40000000"]]
    assert after == [["rm", "-f", "/w/a b/gridftp-src-5301.dat"]]
    argv = GridFTP().client(spec)
    assert argv[:5] == ["sh", "-c", gridftp._DISK_SEND, "globus-url-copy", "/w/a b/gridftp-src-5301.dat"]
    assert argv[5:] == ["globus-url-copy", "-vb", "-fast", "-p", "8",
                        "file:///w/a%20b/gridftp-src-5301.dat", "ftp://D1:15301/w/a%20b/gridftp-recv-5301.dat"]
    # a duration-bounded disk burst writes a file of the flow's file_bytes
    before, _ = GridFTP().prepare(_spec(storage="disk", bytes=None, duration_s=10, options={"file_bytes": 5}))
    assert before[0][-1] == "5"
    assert GridFTP().prepare(_spec()) == ([], [])


@pytest.mark.parametrize("kw", [{"protocol": "udp"}, {"duration_s": 3.0}, {"bytes": None}, {"storage": "tape"},
                                {"storage": "disk", "bytes": None, "duration_s": 3.0}])
def test_client_rejects(kw):
    with pytest.raises(ValueError):
        GridFTP().client(_spec(**kw))


def test_disk_send_script_cleans_up(tmp_path):
    """The disk wrapper with a stand-in for globus-url-copy: file exists while it runs, is gone after."""
    src = tmp_path / "d" / "src.dat"
    subprocess.run(["sh", "-c", gridftp._DISK_WRITE, "sh", str(src), "1000"], check=True, timeout=10)
    res = subprocess.run(["sh", "-c", gridftp._DISK_SEND, "sh", str(src),
                          "sh", "-c", 'stat -c %s "$0"; exit 3', str(src)],
                         capture_output=True, text=True, timeout=10, check=False)
    assert res.stdout.strip() == "1000" and res.returncode == 3
    assert not src.exists()
    res = subprocess.run(["sh", "-c", gridftp._DISK_SEND, "sh", str(src), "true"], capture_output=True, text=True)
    assert res.returncode == 1 and "missing" in res.stderr


# --------------------------------------------------------------------------- parse (real outputs)


def test_parse_markers_carriage_returns():
    markers = gridftp.parse_markers(_data("mem_dur_p16.client.txt"))
    assert [b for _, b in markers] == [57147392, 115343360]
    assert [round(t, 2) for t, _ in markers] == [5.0, 10.0]


def test_parse_memory_bytes_p8():
    r = parse(_data("mem_bytes_p8.client.txt"), _data("mem_bytes_p8.server.txt"), _spec())
    assert r.error is None and r.protocol == "tcp" and r.cca is None
    assert r.bytes_received == r.bytes_sent == 60_000_000
    assert r.streams == 8 and r.seconds == pytest.approx(5.081, abs=0.01)
    assert r.remote_port == 5301 and r.retransmits is None
    assert r.extra["type"] == "ESTO" and r.extra["code"] == 226
    assert r.extra["receiver_retrans"] == [0] * 8 and r.extra["control_port"] == 15301
    # two markers (5.0 s and the end at 5.1 s): the 0.1 s tail folds into the first interval
    assert len(r.receiver_intervals) == 2
    assert sum(i.bytes for i in r.intervals) == 60_000_000
    assert [i.end_s for i in r.intervals] == [pytest.approx(5.1, abs=0.01)]


def test_parse_memory_duration_p16_adds_tail_from_server():
    r = parse(_data("mem_dur_p16.client.txt"), _data("mem_dur_p16.server.txt"), _spec(bytes=None, duration_s=11))
    assert r.error is None and r.streams == 16 and r.bytes_received == 128_751_270
    assert r.extra["type"] == "STOR" and "receiver_retrans" not in r.extra   # cancelled by -t: no retrans field
    ivs = r.intervals
    assert [round(i.end_s, 1) for i in ivs] == [5.0, 10.0, 11.0]
    assert sum(i.bytes for i in ivs) == r.bytes_received
    for iv in ivs:
        assert 85 < iv.bytes * 8 / iv.seconds / 1e6 < 110     # 100 Mbit bottleneck


def test_parse_single_stream_and_disk():
    r = parse(_data("mem_dur_p1.client.txt"), _data("mem_dur_p1.server.txt"), _spec(bytes=None, duration_s=6, streams=1))
    assert r.streams == 1 and r.bytes_received == 68_586_294 and r.seconds == pytest.approx(5.98, abs=0.01)
    assert sum(i.bytes for i in r.intervals) == r.bytes_received
    r = parse(_data("disk_bytes_p8.client.txt"), _data("disk_bytes_p8.server.txt"),
              _spec(storage="disk", bytes=40_000_000))
    assert r.error is None and r.bytes_received == 40_000_000 and r.seconds == pytest.approx(3.37, abs=0.01)


def test_parse_transfer_log_file_alone():
    recs = gridftp.parse_transfer_stats(_data("mem_bytes_p8.transfer.log"))
    assert recs == [{"file": "/dev/null", "type": "ESTO", "code": 226, "bytes": 60_000_000, "streams": 8,
                     "buffer": 69120, "block": 262144, "dest": "10.233.1.2", "seconds": 5.081165,
                     "retrans": [0] * 8}]
    r = parse("", _data("mem_dur_p16.transfer.log"), None)
    assert r.bytes_received == 128_751_270 and r.receiver_intervals[-1].end_s == pytest.approx(11.035, abs=0.01)


def test_parse_client_only_and_short_transfer():
    r = parse(_data("mem_bytes_p8.client.txt"), "", _spec())
    assert r.bytes_received == 60_000_000 and r.error is None
    r = parse(_data("mem_bytes_p8.client.txt"), "", _spec(bytes=70_000_000))
    assert r.error == "GridFTP moved 60000000 of 70000000 bytes"


def test_parse_failed_transfer_code():
    server = _data("mem_bytes_p8.server.txt").replace("CODE=226", "CODE=426")
    r = parse(_data("mem_bytes_p8.client.txt"), server, _spec())
    assert r.error == "GridFTP transfer ended with code 426"


def test_parse_refused_raises():
    with pytest.raises(ValueError):
        parse(_data("refused.client.txt"), "", _spec())


# --------------------------------------------------------------------------- lab

PID = os.getpid()
NS_A, NS_R, NS_B = (f"lhtgf-{PID}-{x}" for x in "arb")
A_IP, R_A_IP, R_B_IP, B_IP = "10.233.1.2", "10.233.1.1", "10.233.2.1", "10.233.2.2"
RATE_MBPS = 100
NETNS_ETC = Path("/etc/netns")
HAVE_GLOBUS = all(shutil.which(t) for t in ("globus-gridftp-server", "globus-url-copy"))


def _run(*cmd, timeout=30, check=True):
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, check=check)


def _nsx(ns, *cmd):
    return ["ip", "netns", "exec", ns, *cmd]


def _build_lab():
    routed(NS_A, NS_R, NS_B, A_IP, R_A_IP, R_B_IP, B_IP)
    _run(*_nsx(NS_R, "tc", "qdisc", "add", "dev", "r1", "root", "tbf", "rate", f"{RATE_MBPS}mbit",
               "burst", "32kb", "limit", "625000"))
    # as longhaul does: host names in /etc/netns/<ns>/hosts (the server resolves its bind name)
    for ns in (NS_A, NS_B):
        (NETNS_ETC / ns).mkdir(parents=True, exist_ok=True)
        (NETNS_ETC / ns / "hosts").write_text(f"127.0.0.1\tlocalhost\n{A_IP}\tS1 s1\n{B_IP}\tD1 d1\n")


def _teardown():
    for ns in (NS_A, NS_R, NS_B):
        _run("ip", "netns", "del", ns, check=False)
    for ns in (NS_A, NS_B):
        shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)


def _stop(proc: subprocess.Popen, timeout=5.0) -> int:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)   # own session: the server's per-connection children too
        except ProcessLookupError:
            pass
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.wait(timeout)


def _per_second(probe_text: str, port: int, t_start: float) -> tuple[list[int], set[int]]:
    """Per-second delivered bytes from the tcp_info probe: each data socket's bytes_acked, summed
    (a closed socket keeps its last value), differenced at whole seconds since the client started."""
    last: dict[int, int] = {}
    cum: list[tuple[float, int]] = []
    for line in probe_text.splitlines():
        tick = parse_probe_line(line)
        if tick is None:
            continue
        for sock in tick.socks:
            if sock.dport == port and (sock.bytes_acked or 0) >= last.get(sock.sport, 0):
                last[sock.sport] = sock.bytes_acked or 0
        cum.append((tick.t - t_start, sum(last.values())))
    bins: dict[int, int] = defaultdict(int)
    prev = 0
    for t, total in cum:
        bins[max(0, int(t))] += total - prev
        prev = total
    return [bins[k] for k in range(max(bins) + 1)] if bins else [], set(last)


def _burst(tool: GridFTP, spec: BurstSpec, tmp: Path, tag: str):
    server_spec = tool.server(spec)
    procs: list[subprocess.Popen] = []
    with ExitStack() as files:
        out = {k: files.enter_context(open(tmp / f"{tag}.{k}", "w"))
               for k in ("server", "probe", "client", "client.err")}
        try:
            srv = subprocess.Popen(_nsx(NS_B, *server_spec.argv), stdout=out["server"],
                                   stderr=subprocess.STDOUT, start_new_session=True)
            procs.append(srv)
            deadline = time.monotonic() + 15
            while not _run(*_nsx(NS_B, *server_spec.ready), check=False).stdout.strip():
                assert srv.poll() is None, (tmp / f"{tag}.server").read_text()
                assert time.monotonic() < deadline, "server did not listen"
                time.sleep(0.05)
            probe = subprocess.Popen(_nsx(NS_A, sys.executable, "-m", "longhaul.drivers.agents.tcpinfo_probe",
                                          "--period", "0.1", "--ports", str(spec.port)),
                                     stdout=out["probe"], stderr=subprocess.DEVNULL, start_new_session=True)
            procs.append(probe)
            time.sleep(0.3)
            before, after = tool.prepare(spec)          # as the trial does, before its clock
            for argv in before:
                _run(*_nsx(NS_A, *argv), timeout=120)
            t_start = time.time()           # the probe stamps its ticks with the wall clock
            cli = subprocess.Popen(_nsx(NS_A, *tool.client(spec)), stdout=out["client"],
                                   stderr=out["client.err"], start_new_session=True)
            procs.append(cli)
            client_rc = cli.wait(60)
            time.sleep(0.3)
            _stop(probe)
            _stop(srv)
            for argv in server_spec.cleanup:
                _run(*_nsx(NS_B, *argv))
            for argv in after:
                _run(*_nsx(NS_A, *argv))
        finally:
            for proc in procs:
                _stop(proc)
    result = tool.parse((tmp / f"{tag}.client").read_text(), (tmp / f"{tag}.server").read_text(), spec)
    per_s, sockets = _per_second((tmp / f"{tag}.probe").read_text(), spec.port, t_start)
    print(f"\n{tag}: rc {client_rc}, {result.bytes_received} B in {result.seconds:.2f} s "
          f"({result.bytes_received * 8 / result.seconds / 1e6:.1f} Mb/s), tool intervals "
          f"{[(i.end_s, round(i.bytes * 8 / i.seconds / 1e6, 1)) for i in result.intervals]}, "
          f"{len(sockets)} data sockets, per-second Mb/s {[round(b * 8 / 1e6, 1) for b in per_s]}")
    return client_rc, result, per_s, sockets


def _time_wait_on_receiver(port: int) -> None:
    """A connection to B:port that B closes first, so B holds the port in TIME_WAIT for a minute."""
    server = ("import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
              f"s.bind(('{B_IP}', {port})); s.listen(); c, _ = s.accept(); c.close(); s.close()")
    srv = subprocess.Popen(_nsx(NS_B, sys.executable, "-c", server))
    try:
        deadline = time.monotonic() + 10
        while f":{port} " not in _run(*_nsx(NS_B, "ss", "-Hltn", f"sport = :{port}")).stdout:
            assert srv.poll() is None and time.monotonic() < deadline, "the closing server did not listen"
            time.sleep(0.02)
        client = f"import socket; c = socket.create_connection(('{B_IP}', {port})); c.recv(1); c.close()"
        _run(*_nsx(NS_A, sys.executable, "-c", client))
        assert srv.wait(10) == 0
    finally:
        _stop(srv)
    assert "TIME-WAIT" in _run(*_nsx(NS_B, "ss", "-Htan", f"sport = :{port}")).stdout


@pytest.mark.lab
@requires_lab
@pytest.mark.skipif(not HAVE_GLOBUS, reason="globus-gridftp-server-progs / globus-gass-copy-progs not installed")
@pytest.mark.timeout(180)
def test_lab_gridftp_put_memory_and_disk(tmp_path):
    tool = GridFTP()
    work = tmp_path / "work"
    try:
        _build_lab()
        # memory-to-memory, 60 MB over 8 streams, S -> D through the 100 Mbit shaper; a VM stall can
        # spoil one run, so up to three tries for the throughput claim
        for attempt in range(3):
            spec = _spec(port=5301 + attempt, workdir=PurePosixPath(str(work / f"m{attempt}")))
            rc, result, per_s, sockets = _burst(tool, spec, tmp_path, f"mem{attempt}")
            assert rc == 0 and result.error is None
            assert result.bytes_received == 60_000_000 and result.streams == 8
            assert len(sockets) == 8                        # every data stream went to the burst's port
            assert abs(sum(per_s) - result.bytes_received) <= 0.10 * result.bytes_received, per_s
            steady = [b * 8 / 1e6 for b in per_s[1:-1]]     # whole seconds after the first
            if steady and statistics.median(steady) >= 0.6 * RATE_MBPS:
                break
        assert statistics.median(steady) >= 0.6 * RATE_MBPS, steady
        assert max(steady) <= 1.15 * RATE_MBPS, steady
        log = (work / "m0" / "gridftp-transfer-5301.log").read_text()
        assert gridftp.parse_transfer_stats(log)[0]["bytes"] == 60_000_000

        # disk-to-disk: a 20 MB file written on S, stored into D's workdir, both removed afterwards;
        # its data port is in TIME_WAIT on D (a stopped trial's server closed first), as CI once saw
        _time_wait_on_receiver(5310)
        spec = _spec(port=5310, bytes=20_000_000, streams=4, storage="disk",
                     workdir=PurePosixPath(str(work / "d")))
        rc, result, per_s, sockets = _burst(tool, spec, tmp_path, "disk")
        assert rc == 0 and result.error is None and result.bytes_received == 20_000_000
        assert len(sockets) == 4
        assert sorted(p.name for p in (work / "d").iterdir()) == ["gridftp-transfer-5310.log"]

        for ns in (NS_A, NS_B):                             # nothing of ours still runs in the lab
            assert _run("ip", "netns", "pids", ns).stdout.strip() == "", ns
    finally:
        _teardown()
    assert not any((Path("/run/netns") / ns).exists() for ns in (NS_A, NS_R, NS_B))
    assert not any((NETNS_ETC / ns).exists() for ns in (NS_A, NS_B))


def test_listening_ports_reads_ss_lines():
    text = ("LISTEN 0      128    0.0.0.0:2024 0.0.0.0:*\n"
            "LISTEN 0      5         [::]:20001    [::]:*\n"
            "LISTEN 0      4096   [fe80::1%eth0]:30000 *:*\n")
    assert listening_ports(text) == {2024, 20001, 30000}
    assert listening_ports("") == set()
