"""The tcp_info probe in C (drivers/tcpinfo/tcpinfo.c) prints what the Python probe prints, read
the same way, at 100 Hz: run side by side on a real iperf3 flow in a namespace."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lab_support import requires_lab, scratch_namespace

from longhaul.collectors.live.acked_rate import CONTROL_BYTES
from longhaul.collectors.live.socket_sampler import SocketSampler, Tick, parse_probe_line, probe_argv
from longhaul.drivers.agents.tcpinfo_probe import NATIVE
from longhaul.hardware.backends.netns.lab import LAB_EHASH_ENTRIES, own_ehash
from longhaul.hardware.executors.process import MACHINE, NetnsExecutor, ProcessTable, wait_until

pytestmark = [pytest.mark.lab, requires_lab]


def _ticks(text: str) -> list[Tick]:
    return [tick for tick in map(parse_probe_line, text.splitlines()) if tick]


@pytest.mark.skipif(not NATIVE.exists(), reason=f"{NATIVE} not built (make setup builds it)")
def test_the_c_probe_prints_the_python_probe_s_lines_at_100_hz(tmp_path):
    assert probe_argv([5202, 5201], 0.01)[0] == str(NATIVE)                       # chosen where built
    assert probe_argv([5201], 0.01, native=False)[:3] == [sys.executable, "-m", "longhaul.drivers.agents.tcpinfo_probe"]
    with scratch_namespace() as ns:
        netns = ["ip", "netns", "exec", ns]
        server = subprocess.Popen([*netns, "iperf3", "-s", "-p", "5201", "-1"], stdout=subprocess.DEVNULL,
                                  start_new_session=True)
        wait_until(lambda: "5201" in subprocess.run([*netns, "ss", "-ltnH"], capture_output=True, text=True).stdout, 10)
        client = subprocess.Popen([*netns, "iperf3", "-c", "127.0.0.1", "-p", "5201", "-t", "4", "-b", "20M", "-C", "cubic"],
                                  stdout=subprocess.DEVNULL, start_new_session=True)
        outs, files = {}, {native: tmp_path / f"native-{native}.jsonl" for native in (True, False)}
        probes = {native: subprocess.Popen([*netns, *probe_argv([5201, 5999], 0.01, native)],
                                           stdout=files[native].open("w"), start_new_session=True)
                  for native in (True, False)}      # into files, as the sampler has them: a pipe would fill
        try:
            wait_until(lambda: client.poll() is not None, 20)
        finally:
            for native, proc in probes.items():
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=10)
                outs[native] = files[native].read_text()
            for proc in (client, server):
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        assert outs[True].splitlines()[0] == outs[False].splitlines()[0]             # the same header
        c_ticks, py_ticks = _ticks(outs[True]), _ticks(outs[False])
        span = c_ticks[-1][0] - c_ticks[0][0]
        assert span > 2 and len(c_ticks) / span >= 90, (len(c_ticks), span)          # 100 Hz kept
        assert abs(c_ticks[0][0] - time.time()) < 60                                  # the wall clock
        # each reading with its dump's length: well under a millisecond here, for either probe
        assert all(0 <= tick.dump_s < 0.005 for tick in c_ticks + py_ticks), max(t.dump_s for t in c_ticks + py_ticks)
        c_socks = {(s.src, s.sport, s.dst, s.dport) for _, socks, _ in c_ticks for s in socks}
        py_socks = {(s.src, s.sport, s.dst, s.dport) for _, socks, _ in py_ticks for s in socks}
        assert c_socks == py_socks and len(c_socks) == 2        # iperf3's control and data connections
        data = max(c_socks, key=lambda k: max(s.bytes_acked for _, socks, _ in c_ticks for s in socks
                                              if (s.src, s.sport, s.dst, s.dport) == k))
        series = [s for _, socks, _ in c_ticks for s in socks if (s.src, s.sport, s.dst, s.dport) == data]
        # iperf3 sets -C on a socket already connected: a 100 Hz probe caught one at the namespace's
        # default (bbr) before it; what carried the data ran cubic (as observed_cca counts it)
        assert {s.cca for s in series if s.bytes_acked >= CONTROL_BYTES} == {"cubic"}
        assert all(s.mss and s.cwnd and s.srtt_ms for s in series)
        acked = [s.bytes_acked for s in series]
        assert acked == sorted(acked) and acked[-1] > 5_000_000                       # 20 Mb/s for 4 s
        last_py = max((s for _, socks, _ in py_ticks for s in socks if (s.src, s.sport, s.dst, s.dport) == data),
                      key=lambda s: s.bytes_acked)
        assert abs(last_py.bytes_acked - acked[-1]) <= 0.05 * acked[-1]              # the same counter


def test_lab_namespaces_get_an_established_hash_table_of_their_own():
    """A sock_diag dump walks the whole established-socket table; the lab's namespaces get a small
    one of their own, and the machine's setting is put back at once."""
    knob = Path("/proc/sys/net/ipv4/tcp_child_ehash_entries")
    if not knob.exists():
        pytest.skip("this kernel has no per-namespace TCP hash tables (Linux 6.1+)")
    before = knob.read_text()
    name = f"lh-probe-ehash-{os.getpid()}"
    try:
        with own_ehash():
            subprocess.run(["ip", "netns", "add", name], check=True)
        assert knob.read_text() == before
        own = subprocess.run(["ip", "netns", "exec", name, "sysctl", "-n", "net.ipv4.tcp_ehash_entries"],
                             capture_output=True, text=True, check=True).stdout
        assert int(own) == LAB_EHASH_ENTRIES
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


@pytest.mark.skipif(not NATIVE.exists(), reason=f"{NATIVE} not built (make setup builds it)")
def test_one_c_probe_reads_every_sender_namespace_of_the_machine(tmp_path):
    """Senders that are namespaces of this machine share one probe process (100 wake-ups a second
    at 100 Hz, not 100 per sender); each still gets its own file, with what a probe inside it sees."""
    names = [f"lh-probe-{os.getpid()}-{k}" for k in (1, 2)]
    procs, started = ProcessTable(), []
    try:
        for name in names:
            subprocess.run(["ip", "netns", "add", name], check=True)
            subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        hosts = {f"S{k}": NetnsExecutor(f"S{k}", name, procs) for k, name in enumerate(names, start=1)}
        for k, host in enumerate(hosts.values()):
            port = 5201 + k
            server = host.start(["iperf3", "-s", "-p", str(port), "-1"])
            wait_until(lambda h=host, p=port: str(p) in h.run(["ss", "-ltnH"]).stdout, 10)
            started += [server, host.start(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "4", "-b", "10M"])]
        inside = hosts["S2"].start(probe_argv([5201, 5202], 0.01), stdout=tmp_path / "inside.jsonl")
        sampler = SocketSampler(hosts, {5201: "f1", 5202: "f2"}, tmp_path, period_s=0.01)
        t0 = time.monotonic()
        sampler.start(t0)
        assert list(sampler._procs) == [MACHINE]                                  # one process for both
        wait_until(lambda: all(p.poll() is not None for p in started[1::2]), 20)
        samples = sampler.stop()
        inside.stop()
    finally:
        procs.stop_all()
        for name in names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
    per_host = {host: _ticks((tmp_path / f"tcpinfo-{host}.jsonl").read_text()) for host in hosts}
    for host, ticks in per_host.items():
        span = ticks[-1][0] - ticks[0][0]
        assert span > 2 and len(ticks) / span >= 90, (host, len(ticks), span)        # 100 Hz in each
    flows = {s.flow: max(x.sock.bytes_acked for x in samples if x.flow == s.flow) for s in samples}
    assert set(flows) == {"f1", "f2"} and min(flows.values()) > 2_500_000             # 10 Mb/s for 4 s each
    seen = {(s.src, s.sport, s.dst, s.dport) for _, socks, _ in per_host["S2"] for s in socks}
    seen_inside = {(s.src, s.sport, s.dst, s.dport) for _, socks, _ in _ticks((tmp_path / "inside.jsonl").read_text())
                   for s in socks}
    assert seen == seen_inside and {k[3] for k in seen} == {5202}                   # that namespace's sockets only
