"""UDT4 driver (drivers/udt.py) and its tester longhaul-udtperf (drivers/udt/udtperf.cpp).

Unit tests parse real output in tests/data/udt/ (how it was captured: tests/data/udt/README.md).
The lab test runs 6 s memory-to-memory a -> r -> b through a 100 Mb/s tbf with a 125 kB queue
(one BDP at 10 ms, UDT's control period: the path itself has ~0.1 ms RTT and no netem here).
Dev box (Debian 12 VM, 2 shared cores, other helpers' lab tests running), 15 runs: the median of the
receiver's per-second Mb/s from 2.5 s on was 42-92 (12 of 15 >= 60, 75-92 when the box was quiet);
over the whole burst, start included, 44-82 Mb/s; 6 s bursts ended after 6.24-6.37 s; the receiver
found 0.3-2.6 % of packets missing (tbf drops: UDT's rate control overshoots a small queue at
near-zero RTT, and its start overshoots more).
"""
from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import time
from pathlib import Path

import pytest
from lab_support import requires_lab
from netns_wiring import routed

from longhaul.drivers import udt
from longhaul.drivers.tool import BurstSpec, Shape

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parents[1] / "data" / "udt"
PAYLOAD = 1456   # one UDT data packet at the default MSS 1500


def read(name: str) -> str:
    return (DATA / name).read_text()


def spec(**kw) -> BurstSpec:
    base = {"receiver": "D1", "port": 9000, "duration_s": 6.0, "bytes": None}
    base.update(kw)
    return BurstSpec(**base)


# ------------------------------------------------------------------------------------------ argv

def test_helper_path(monkeypatch):
    monkeypatch.delenv("LONGHAUL_UDTPERF", raising=False)
    assert udt.helper_path() == REPO / "build" / "bin" / "longhaul-udtperf"
    monkeypatch.setenv("LONGHAUL_UDTPERF", "/opt/u/udtperf")
    assert udt.helper_path() == Path("/opt/u/udtperf")
    assert udt.Udt().executables == ("/opt/u/udtperf",)   # absolute: shutil.which checks it as is


def test_receiver_and_sender_argv():
    assert udt.receiver_argv(9000, binary="u") == ["u", "recv", "--port", "9000"]
    assert udt.receiver_argv(9000, bind="10.0.0.1", options={"mss": 1400, "udp_rcvbuf": 4 << 20}, binary="u") == [
        "u", "recv", "--port", "9000", "--bind", "10.0.0.1", "--mss", "1400", "--udp-rcvbuf", str(4 << 20)]
    assert udt.sender_argv("D1", 9000, duration_s=6.0, binary="u") == [
        "u", "send", "--host", "D1", "--port", "9000", "--seconds", "6"]
    assert udt.sender_argv("D1", 9000, bytes_=14_000_000_000, rate_mbps=250.0, binary="u") == [
        "u", "send", "--host", "D1", "--port", "9000", "--bytes", "14000000000", "--max-mbps", "250"]


def test_tcp_window_is_not_udts_buffer():
    s = spec(window_bytes=4_000_000, options={"udt_rcvbuf": 20_000_000})
    for argv in (udt.Udt().client(s), udt.Udt().server(s).argv):
        assert "--udt-sndbuf" not in argv and argv[argv.index("--udt-rcvbuf") + 1] == "20000000"


@pytest.mark.parametrize("kw", [{}, {"duration_s": 1, "bytes_": 1}])
def test_sender_needs_one_of_duration_and_bytes(kw):
    with pytest.raises(ValueError):
        udt.sender_argv("D1", 1, binary="u", **kw)


@pytest.mark.parametrize("value", [0, -1, 1.5, "10", True])
def test_bad_option_values(value):
    with pytest.raises(ValueError):
        udt.receiver_argv(1, options={"mss": value}, binary="u")


def test_tool_server_and_client(monkeypatch):
    monkeypatch.setenv("LONGHAUL_UDTPERF", "/b/udtperf")
    tool = udt.Udt()
    assert tool.name == "udt" and tool.shared_servers is False and tool.sets_cca and not tool.counts_arrivals
    # the trial's own option keys (clients, file_bytes) are not UDT's and are left alone; a TCP cca
    # does not apply to UDT and is ignored
    s = spec(cca="cubic", options={"clients": None, "file_bytes": None, "fc": 8192})
    server = tool.server(s)
    assert server.argv == ["/b/udtperf", "recv", "--port", "9000", "--fc", "8192"]
    assert server.ready == ["ss", "-lnHu", "sport", "=", ":9000"]
    assert tool.client(s) == ["/b/udtperf", "send", "--host", "D1", "--port", "9000", "--seconds", "6", "--fc", "8192"]
    assert tool.client(spec(duration_s=None, bytes=10**9))[-2:] == ["--bytes", str(10**9)]


@pytest.mark.parametrize("kw", [{"streams": 2}, {"storage": "disk"}, {"duration_s": float("nan")},
                                {"shape": Shape("sinusoid", 10, 100, 8)}])
def test_tool_rejects_what_udt_cannot_do(kw):
    with pytest.raises(ValueError):
        udt.Udt().client(spec(**kw))


# ------------------------------------------------------------------------------------------ parse

def test_parse_seconds_run():
    r = udt.Udt().parse(read("seconds_send.jsonl"), read("seconds_recv.jsonl"), spec())
    assert r.protocol == "udt" and r.cca is None and r.streams == 1 and r.error is None
    assert r.bytes_sent == r.bytes_received == 39_845_888
    assert len(r.receiver_intervals) == 7 and len(r.sender_intervals) == 7
    assert sum(i.bytes for i in r.receiver_intervals) == r.bytes_received
    assert sum(i.bytes for i in r.intervals) == r.bytes_received
    assert r.receiver_intervals[1].end_s == pytest.approx(2.006, abs=1e-3)
    assert r.receiver_intervals[1].streams == [r.receiver_intervals[1].bytes]
    assert r.retransmits == 177
    assert r.lost_percent == pytest.approx(100 * 177 / 27575)
    assert r.local_ports == [37702] and r.remote_port == 9010
    assert r.seconds == pytest.approx(6.327)
    assert r.extra["rtt_ms"] == pytest.approx(2.594)
    assert r.extra["flow_window_pkts"] == 8191 and r.extra["congestion_window_pkts"] == 1125
    assert r.extra["receiver_end"] == "closed" and r.extra["receiver_idle_s"] < 0.1
    assert r.extra["receiver_last"]["pktRecvTotal"] == 27003


def test_parse_bytes_run_with_options():
    r = udt.parse(read("bytes_send.jsonl"), read("bytes_recv.jsonl"))
    assert r.error is None
    assert r.bytes_sent == r.bytes_received == 20_000_000
    assert sum(i.bytes for i in r.receiver_intervals) == 20_000_000
    assert r.retransmits == 6305 and r.lost_percent == pytest.approx(100 * 2369 / 21058)
    assert r.extra["flow_window_pkts"] == 2824   # bounded by the receiver's 4 MB UDT buffer


def test_parse_receiver_terminated_mid_transfer():
    r = udt.parse(read("recvterm_send.jsonl"), read("recvterm_recv.jsonl"))
    assert r.error and r.error.startswith("sender:")
    assert r.extra["receiver_end"] == "signal"
    assert 0 < r.bytes_received < r.bytes_sent
    assert sum(i.bytes for i in r.receiver_intervals) == r.bytes_received


def test_parse_idle_receiver_and_missing_sender():
    r = udt.Udt().parse("", read("idle_recv.jsonl"), spec(port=9013))
    assert r.error == "sender printed nothing" and r.remote_port == 9013
    assert r.bytes_received == 0 and r.receiver_intervals == [] and r.retransmits is None
    assert r.lost_percent is None


def test_parse_killed_sender_keeps_its_intervals():
    lines = read("seconds_send.jsonl").splitlines()
    text = "\n".join(lines[:-1]) + "\n" + lines[-1][:40]   # the summary cut off mid-line
    r = udt.parse(text, read("seconds_recv.jsonl"))
    assert r.error == "sender gave no summary"
    assert r.bytes_sent == sum(i.bytes for i in r.sender_intervals) == 39_845_888
    assert r.retransmits is None


def test_parse_rejects_other_output():
    with pytest.raises(ValueError):
        udt.parse("hello\n", "{not json\n")


def test_binary_rejects_bad_args():
    binary = udt.helper_path()
    if not binary.exists():
        pytest.skip(f"{binary} not built (make -C drivers/udt OUT={REPO}/build/bin)")
    for argv in ([], ["serve"], ["recv"], ["recv", "--port", "0"], ["recv", "--port", "9", "--seconds", "1"],
                 ["send", "--host", "h", "--port", "9"], ["send", "--host", "h", "--port", "9", "--seconds", "1",
                                                          "--bytes", "5"],
                 ["send", "--host", "h", "--port", "9", "--bytes", "1x"], ["recv", "--port", "9", "--mss"]):
        res = subprocess.run([str(binary), *argv], capture_output=True, text=True, timeout=5, check=False)
        assert res.returncode == 2, (argv, res)
        assert res.stderr and not res.stdout, argv


# ------------------------------------------------------------------------------------------ lab

PID = os.getpid()
NS_A, NS_R, NS_B = (f"lhtudt-{PID}-{x}" for x in "arb")
A_IP, R_A_IP, R_B_IP, B_IP = "10.232.1.2", "10.232.1.1", "10.232.2.1", "10.232.2.2"
RATE_MBPS = 100
QUEUE_BYTES = RATE_MBPS * 1_000_000 // 8 // 100     # one BDP at 10 ms: 125 kB
# The best of up to three runs must reach this: a quiet box gives 75-92, a busy one 39-42 (three
# runs at 27 % host CPU steal: UDT paces packets ~100 us apart and starves first); the claim is
# that UDT carries bulk data at a fair part of the link, its rate is measured by bench and profiles.
FLOOR_MBPS = 25


def _run(*cmd, timeout=30, check=True):
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, check=check)


def _nsx(ns, *cmd):
    return ["ip", "netns", "exec", ns, *cmd]


@pytest.fixture(scope="module")
def udtperf():
    if not Path("/usr/include/udt/udt.h").exists():
        pytest.skip("libudt-dev is not installed (make setup installs it)")
    for tool in ("make", "g++"):
        if shutil.which(tool) is None:
            pytest.skip(f"building longhaul-udtperf needs {tool}")
    out = REPO / "build" / "bin"
    res = _run("make", "-C", str(REPO / "drivers" / "udt"), f"OUT={out}", timeout=180, check=False)
    assert res.returncode == 0, res.stderr
    return out / udt.BINARY_NAME


@pytest.fixture(scope="module")
def lab(udtperf):
    hosts = Path("/etc/netns") / NS_A
    try:
        routed(NS_A, NS_R, NS_B, A_IP, R_A_IP, R_B_IP, B_IP)
        _run(*_nsx(NS_R, "tc", "qdisc", "add", "dev", "r1", "root", "tbf", "rate", f"{RATE_MBPS}mbit",
                   "burst", "16kb", "limit", str(QUEUE_BYTES)))
        # the sender resolves the receiver by name, as in the appliance (`ip netns exec` mounts this)
        hosts.mkdir(parents=True, exist_ok=True)
        (hosts / "hosts").write_text(f"127.0.0.1 localhost\n{B_IP} D1\n")
        yield udtperf
    finally:
        shutil.rmtree(hosts, ignore_errors=True)
        for ns in (NS_A, NS_R, NS_B):
            _run("ip", "netns", "del", ns, check=False)


def _start_receiver(binary, burst: BurstSpec) -> subprocess.Popen:
    server = udt.Udt().server(burst)
    argv = [str(binary), *server.argv[1:]]
    proc = subprocess.Popen(_nsx(NS_B, *argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while not _run(*_nsx(NS_B, *server.ready), check=False).stdout.strip():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "receiver never listened"
        time.sleep(0.05)
    return proc


def _finish(proc, timeout=15.0):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()   # our own Popen, by pid
        out, err = proc.communicate(timeout=5)
    return proc.returncode, out, err


def _transfer(binary, port: int):
    burst = spec(port=port, duration_s=6.0)
    recv = _start_receiver(binary, burst)
    try:
        argv = [str(binary), *udt.Udt().client(burst)[1:]]
        send = _run(*_nsx(NS_A, *argv), timeout=40, check=False)
    finally:
        rrc, rout, rerr = _finish(recv)
    return send, (rrc, rout, rerr), udt.parse(send.stdout, rout)


@requires_lab
@pytest.mark.lab
@pytest.mark.timeout(150)
def test_lab_transfer(lab):
    from longhaul.collectors.live.host_cpu import StealMeter
    best = None
    for attempt in range(3):
        with StealMeter() as steal:
            send, (rrc, _rout, rerr), res = _transfer(lab, 9200 + attempt)
        assert send.returncode == 0, (send.stdout[-500:], send.stderr)
        assert rrc == 0, rerr
        assert res.error is None, res.error
        recv_ivs = res.receiver_intervals
        # reliable: every byte written arrived, and the per-second figures add up to the totals
        assert res.bytes_received == res.bytes_sent > 0
        assert abs(sum(i.bytes for i in recv_ivs) - res.bytes_received) <= PAYLOAD
        assert abs(sum(i.bytes for i in res.sender_intervals) - res.bytes_sent) <= PAYLOAD
        # the backlog cap keeps a 6 s burst near 6 s (UDT's 10 MB buffer alone would add ~1 s)
        assert 5.9 <= res.seconds <= 8.0, res.seconds
        steady = [i.bytes * 8 / i.seconds / 1e6 for i in recv_ivs if i.end_s > 2.5 and i.seconds >= 0.5]
        median = statistics.median(steady)
        print(f"\nUDT a->b through tbf {RATE_MBPS} Mb/s: per second {[round(x, 1) for x in steady]} Mb/s, "
              f"median {median:.1f}, total {res.bytes_received * 8 / res.seconds / 1e6:.1f} Mb/s over "
              f"{res.seconds:.2f} s, retransmits {res.retransmits}, lost {res.lost_percent:.2f} %, "
              f"rtt {res.extra['rtt_ms']} ms, steal {steal.percent} %")
        assert median <= RATE_MBPS * 1.1, "faster than the shaper"
        best = max(best or 0.0, median)
        if best >= FLOOR_MBPS:
            break
    assert best >= FLOOR_MBPS, f"UDT median only {best:.1f} Mb/s"


@requires_lab
@pytest.mark.lab
@pytest.mark.timeout(60)
def test_lab_sigterm(lab):
    # an idle receiver: a summary and exit 0
    idle = _start_receiver(lab, spec(port=9210))
    idle.send_signal(signal.SIGTERM)
    rc, out, err = _finish(idle)
    assert rc == 0, err
    assert udt.parse("", out).extra["receiver_end"] == "signal"
    # mid-transfer: the receiver flushes what it got and exits 0; the sender sees the peer go
    burst = spec(port=9211, duration_s=4.0)
    recv = _start_receiver(lab, burst)
    send = subprocess.Popen(_nsx(NS_A, str(lab), *udt.Udt().client(burst)[1:]), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.5)
        recv.send_signal(signal.SIGTERM)
        rrc, rout, rerr = _finish(recv)
    finally:
        src, sout, _ = _finish(send)
    assert rrc == 0, rerr
    assert src == 1   # the connection broke under it
    res = udt.parse(sout, rout)
    assert res.extra["receiver_end"] == "signal" and res.error.startswith("sender:")
    assert res.bytes_received > 0 and res.receiver_intervals
    assert sum(i.bytes for i in res.receiver_intervals) == res.bytes_received
    assert res.extra["receiver_last"] is not None
