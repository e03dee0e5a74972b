"""TRex STL profile generation, launch plan and runner (drivers/trex_stl.py).

TRex cannot be installed on this machine (it needs its own release tree and DPDK-bound NICs), so
the generated profile is checked as text (compile() and its AST), then executed against a small
stand-in of `trex.stl.api` that records what the profile and the runner ask of TRex; the runner's
output parsed here is what it printed against that stand-in. The live run needs a TRex host.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path, PurePosixPath
from types import SimpleNamespace

import pytest
from trex_stl_lib.trex_stl_sim import STLSim  # TRex's STL library: the test extra (pyproject)
from trex_stl_lib.trex_stl_streams import STLProfile, STLStream

from longhaul.drivers import trex_stl as ts
from longhaul.drivers.tool import BurstSpec, Shape


def _flow(**kw):
    base = {"name": "bg", "pattern": "constant", "start_s": 0.0, "duration_s": 10.0, "bytes": None, "on_s": None, "off_s": None,
                "burst_s": None, "every_s": None}
    base.update(kw)
    return SimpleNamespace(**base)


def _streams(flow, **kw):
    return ts.streams_for(flow, src_ip="10.234.1.1", dst_ip="10.234.2.1", dport=7000, **kw)


def _declared(source: str) -> list[dict]:
    """The STLStream(...) calls in a profile's source: keyword -> source text or mode call."""
    calls = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "STLStream":
            kw = {k.arg: k.value for k in node.keywords}
            mode = kw["mode"]
            calls.append({"name": ast.literal_eval(kw["name"]), "isg": ast.literal_eval(kw["isg"]),
                          "mode": mode.func.id,
                          "mode_args": {k.arg: ast.literal_eval(k.value) for k in mode.keywords},
                          "packet_args": [ast.literal_eval(a) for a in kw["packet"].args],
                          "self_start": ast.literal_eval(kw["self_start"]) if "self_start" in kw else True,
                          "next": ast.literal_eval(kw["next"]) if "next" in kw else None})
    return calls


# --------------------------------------------------------------------------- generation

def test_continuous_line_rate():
    streams = _streams(_flow(start_s=1.5))
    src = ts.profile_source(streams)
    compile(src, "profile.py", "exec")
    (s,) = _declared(src)
    assert s["mode"] == "STLTXCont" and s["mode_args"] == {"percentage": 100.0}
    assert s["isg"] == 1.5e6 and s["packet_args"] == [1518, "10.234.1.1", "10.234.2.1", 7000, 7000]
    assert ts.expected_seconds(streams) is None


def test_bytes_is_single_burst():
    streams = _streams(_flow(duration_s=None, bytes=10_000_000), rate_mbps=100, frame_bytes=1000)
    (s,) = _declared(ts.profile_source(streams))
    assert s["mode"] == "STLTXSingleBurst"
    assert s["mode_args"] == {"total_pkts": 10_000, "bps_L2": 100e6}
    assert ts.expected_seconds(streams) == pytest.approx(0.8)   # 10 MB at 100 Mb/s


def test_square_is_multi_burst_with_tail():
    # seed 000's BG-SQ-UDP1: 10 s on, 10 s off; 45 s leaves a 5 s last burst
    streams = _streams(_flow(pattern="square", duration_s=45.0, on_s=10.0, off_s=10.0), rate_mbps=500)
    decl = _declared(ts.profile_source(streams))
    assert [d["mode"] for d in decl] == ["STLTXMultiBurst", "STLTXSingleBurst"]
    multi, tail = decl
    pps = 500e6 / (1518 * 8)
    assert multi["mode_args"] == {"pkts_per_burst": round(pps * 10), "ibg": 10e6, "count": 2, "bps_L2": 500e6}
    assert multi["next"] == "bg_tail" and tail["name"] == "bg_tail" and tail["self_start"] is False
    assert tail["isg"] == 10e6 and tail["mode_args"]["total_pkts"] == round(pps * 5)
    assert ts.expected_seconds(streams) == pytest.approx(45.0, abs=1e-3)


def test_bursty_udp_x_y_line_rate():
    # UDP(1, 5): 1 s burst every 5 s; line rate needs the port speed to size the bursts
    flow = _flow(pattern="bursty", duration_s=20.0, burst_s=1.0, every_s=5.0)
    with pytest.raises(ValueError, match="line_rate_mbps"):
        _streams(flow)
    streams = _streams(flow, line_rate_mbps=10_000, frame_bytes=1518)
    (s,) = _declared(ts.profile_source(streams))
    assert s["mode"] == "STLTXMultiBurst" and s["mode_args"]["percentage"] == 100.0
    assert s["mode_args"]["count"] == 4 and s["mode_args"]["ibg"] == 4e6
    assert s["mode_args"]["pkts_per_burst"] == round(10e9 / ((1518 + 20) * 8))


@pytest.mark.parametrize("kw", [{"frame_bytes": 63}, {"frame_bytes": 9217}, {"rate_mbps": 0}])
def test_generation_rejects(kw):
    with pytest.raises(ValueError):
        _streams(_flow(), **kw)


# --------------------------------------------------------------------------- plan

# --------------------------------------------------------------------------- TRex's own library

# Each pattern's profile, as TRex's STL client library loads and compiles it into the add_stream
# JSON-RPC calls the server takes (STLSim's json mode: names resolved to stream ids, no simulator).
COMPILED = {
    "continuous": (_flow(start_s=1.5), {"rate_mbps": 200, "frame_bytes": 1024}),
    "single_burst": (_flow(duration_s=None, bytes=10_000_000), {"rate_mbps": 100, "frame_bytes": 1000}),
    "square": (_flow(pattern="square", duration_s=45.0, on_s=10.0, off_s=10.0), {"rate_mbps": 500}),
    "bursty": (_flow(pattern="bursty", duration_s=20.0, burst_s=1.0, every_s=5.0), {"line_rate_mbps": 10_000}),
    "sinusoid": (_flow(pattern="sinusoid", duration_s=10.0, min_mbps=100.0, max_mbps=500.0, period_s=5.0),
                 {"frame_bytes": 1518}),
}


def _compiled(tmp_path, monkeypatch, name: str, streams) -> list[dict]:
    path = tmp_path / f"lh_{name}.py"
    path.write_text(ts.profile_source(streams))
    loaded = STLProfile.load_py(str(path)).get_streams()
    assert [(s.get_name(), s.next) for s in loaded] == [(d.name, d.next) for d in streams]
    # PyPI's trex-stl-lib 0.3 went through 2to3, which turned get_next's `self.next` into
    # `__next__`, so its compiler drops every chain; TRex's own (trex-core's trex_stl_streams.py)
    # returns self.next, which is what this restores
    monkeypatch.setattr(STLStream, "get_next", lambda self: self.next)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        STLSim(bp_sim_path=str(tmp_path)).run([str(path)], mode="json")
    calls = json.loads(out.getvalue())
    assert calls[-1]["method"] == "start_traffic"
    return [c["params"] for c in calls[:-1]]


@pytest.mark.parametrize("name", sorted(COMPILED))
def test_trex_stl_library_compiles_every_pattern(tmp_path, monkeypatch, name):
    flow, kw = COMPILED[name]
    streams = _streams(flow, **kw)
    added = _compiled(tmp_path, monkeypatch, name, streams)
    assert len(added) == len(streams)
    ids = {s.name: a["stream_id"] for s, a in zip(streams, added)}
    for decl, params in zip(streams, added):
        stream = params["stream"]
        mode = stream["mode"]
        assert mode["type"] == decl.mode
        assert mode["rate"] == {"type": decl.rate_kind, "value": pytest.approx(decl.rate_value)}
        assert stream["isg"] == pytest.approx(decl.isg_us) and stream["self_start"] is decl.self_start
        assert stream["next_stream_id"] == (ids[decl.next] if decl.next else -1)
        if decl.mode == "single_burst":
            assert mode["total_pkts"] == decl.total_pkts
        if decl.mode == "multi_burst":
            assert (mode["pkts_per_burst"], mode["ibg"], mode["count"]) == (decl.pkts_per_burst, decl.ibg_us, decl.count)
        frame = base64.b64decode(stream["packet"]["binary"])
        assert len(frame) == decl.frame_bytes - ts.FCS                     # the NIC appends the FCS
        assert frame[26:34] == bytes(map(int, "10.234.1.1".split("."))) + bytes(map(int, "10.234.2.1".split(".")))
        assert int.from_bytes(frame[36:38], "big") == 7000                   # UDP destination port


def test_a_compiled_sinusoid_carries_seed_002s_integral():
    flow, kw = COMPILED["sinusoid"]
    streams = _streams(flow, **kw)
    assert len(streams) == 2 * ts.SINE_STEPS_PER_PERIOD                      # 10 s of a 5 s period
    bits = sum(s.total_pkts * s.frame_bytes * 8 for s in streams)
    # f(t) = Avg cos(t/c) + Min + Avg over whole periods: (Min + Avg) x T = 300 Mb/s x 10 s
    assert bits == pytest.approx(300e6 * 10, rel=1e-3)
    rates = [s.rate_value / 1e6 for s in streams]
    assert rates[0] == pytest.approx(496.9, abs=0.5) and min(rates) == pytest.approx(103.1, abs=0.5)
    assert ts.expected_seconds(streams) == pytest.approx(10.0, abs=0.01)


def test_launch_plan():
    streams = _streams(_flow(pattern="square", duration_s=40.0, on_s=10.0, off_s=10.0), rate_mbps=500)
    plan = ts.launch_plan("/opt/trex/v3.06", streams, workdir="/tmp/w", tag="bg1", trex_cfg="/etc/trex_cfg.yaml")
    assert set(plan.files) == {"/tmp/w/bg1-profile.py", "/tmp/w/bg1-runner.py"}
    for path, text in plan.files.items():
        compile(text, path, "exec")
    assert plan.server_argv == ["sh", "-c", ("cd /opt/trex/v3.06 && exec ./t-rex-64 -i -c 1 --no-scapy-server "
                                "--cfg /etc/trex_cfg.yaml")]
    assert plan.server_ready == ["ss", "-lntH", "sport", "=", ":4501"]
    assert plan.argv[:2] == ["python3", "/tmp/w/bg1-runner.py"]
    args = json.loads(plan.argv[2])
    assert args["profile_path"] == "/tmp/w/bg1-profile.py" and args["duration_s"] is None
    assert args["limit_s"] == pytest.approx(60.0, abs=0.01) and args["ports"] == [0]
    assert plan.expected_s == pytest.approx(30.0, abs=1e-3)   # bursts at 0 and 20 s; the last 10 s are off


def test_continuous_needs_duration():
    with pytest.raises(ValueError, match="duration_s"):
        ts.runner_args("/opt/trex", _streams(_flow()), duration_s=None)


def test_tool_client_is_inline():
    spec = BurstSpec("D1", 7000, 5.0, None, protocol="udp", rate_mbps=300.0,
                     options={"trex_path": "/opt/trex/v3.06", "src_ip": "10.234.1.1", "dst_ip": "10.234.2.1",
                              "rx_iface": "b0"}, workdir=PurePosixPath("/tmp/w"))
    tool = ts.TrexStl()
    assert tool.name == "trex" and tool.shared_servers is False
    argv = tool.client(spec)
    assert argv[:3] == ["python3", "-c", ts.RUNNER]
    args = json.loads(argv[3])
    assert args["duration_s"] == 5.0 and "bps_L2=300000000.0" in args["profile_source"]
    assert tool.server(spec).argv[2] == "longhaul.drivers.agents.ifrate"
    with pytest.raises(ValueError, match="trex_path"):
        tool.client(BurstSpec("D1", 7000, 5.0, None, options={}))


def test_a_sinusoid_burst_is_stepped_by_trex():
    # the trial gives a sinusoid flow's burst its f(t) as spec.shape (trex's FlowRules allow it)
    assert "sinusoid" in ts.TrexStl.rules.in_burst_shapes
    spec = BurstSpec("D1", 7000, 10.0, None, protocol="udp", shape=Shape("sinusoid", 100.0, 500.0, 5.0),
                     options={"trex_path": "/opt/trex/v3.06", "src_ip": "10.234.1.1", "dst_ip": "10.234.2.1",
                              "rx_iface": "b0"}, workdir=PurePosixPath("/tmp/w"))
    source = json.loads(ts.TrexStl().client(spec)[3])["profile_source"]
    decl = _declared(source)
    assert len(decl) == 2 * ts.SINE_STEPS_PER_PERIOD and {d["mode"] for d in decl} == {"STLTXSingleBurst"}
    assert decl[0]["mode_args"]["bps_L2"] == pytest.approx(496.9e6, rel=1e-3)       # f(t) starts at Max


# --------------------------------------------------------------------------- runner against a stand-in

FAKE_API = '''
import json, os, time, importlib.util

LOG = os.environ["LH_FAKE_TREX_LOG"]


def _log(*item):
    with open(LOG, "a") as f:
        f.write(json.dumps(item) + "\\n")


class _Layer(object):
    SIZE = {"Ether": 14, "IP": 20, "UDP": 8}

    def __init__(self, kind, **fields):
        self.parts = [(kind, fields)]

    def __truediv__(self, other):
        out = _Layer.__new__(_Layer)
        out.parts = self.parts + (other.parts if isinstance(other, _Layer) else [("Raw", len(other))])
        return out

    def __len__(self):
        return sum(self.SIZE.get(k, 0) if k != "Raw" else v for k, v in self.parts)


def Ether(**kw): return _Layer("Ether", **kw)
def IP(**kw): return _Layer("IP", **kw)
def UDP(**kw): return _Layer("UDP", **kw)


class STLPktBuilder(object):
    def __init__(self, pkt): self.pkt = pkt


class _Mode(object):
    def __init__(self, **kw): self.kw = kw
class STLTXCont(_Mode): pass
class STLTXSingleBurst(_Mode): pass
class STLTXMultiBurst(_Mode): pass


class STLStream(object):
    def __init__(self, name=None, packet=None, mode=None, isg=0.0, self_start=True, next=None):
        self.d = {"name": name, "len": len(packet.pkt), "mode": type(mode).__name__, "mode_kw": mode.kw,
                  "isg": isg, "self_start": self_start, "next": next}


class STLProfile(object):
    @staticmethod
    def load_py(path):
        spec = importlib.util.spec_from_file_location("prof", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return SimpleProfile(mod.register().get_streams())


class SimpleProfile(object):
    def __init__(self, streams): self.streams = streams
    def get_streams(self): return self.streams


class STLClient(object):
    def __init__(self, server): _log("init", server); self.polls = 0; self.t0 = None
    def connect(self): _log("connect")
    def reset(self, ports): _log("reset", ports)
    def add_streams(self, streams, ports): _log("add_streams", [s.d for s in streams], ports)
    def clear_stats(self): _log("clear_stats")
    def start(self, ports, duration): _log("start", ports, duration); self.t0 = time.monotonic()
    def is_traffic_active(self, ports):
        self.polls += 1
        return self.polls <= int(os.environ.get("LH_FAKE_TREX_POLLS", "2"))
    def get_stats(self):
        n = 0 if self.t0 is None else int((time.monotonic() - self.t0) * 1000)
        return {0: {"opackets": n, "obytes": n * 1514, "ipackets": 0, "ibytes": 0}, "total": {}}
    def stop(self, ports): _log("stop", ports)
    def wait_on_traffic(self, ports, timeout): _log("wait", ports)
    def get_warnings(self): return []
    def disconnect(self): _log("disconnect")
'''


@pytest.fixture
def fake_trex(tmp_path, monkeypatch):
    api = tmp_path / "trex" / ts.API_SUBDIR / "trex" / "stl"
    api.mkdir(parents=True)
    (api.parent / "__init__.py").write_text("")
    (api / "__init__.py").write_text("")
    (api / "api.py").write_text(textwrap.dedent(FAKE_API))
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("LH_FAKE_TREX_LOG", str(log))
    return tmp_path / "trex", log


def _calls(log: Path) -> list[list]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_runner_inline_against_stand_in(fake_trex, tmp_path):
    trex, log = fake_trex
    streams = _streams(_flow(pattern="square", duration_s=45.0, on_s=10.0, off_s=10.0), rate_mbps=500)
    argv = ts.inline_argv(str(trex), streams, duration_s=None, python=sys.executable)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    res = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False, env={**os.environ, "TMPDIR": str(scratch)})
    assert res.returncode == 0, res.stdout + res.stderr
    calls = _calls(log)
    assert [c[0] for c in calls] == ["init", "connect", "reset", "add_streams", "clear_stats", "start", "wait",
                                     "disconnect"]
    added = calls[3][1]
    assert [s["mode"] for s in added] == ["STLTXMultiBurst", "STLTXSingleBurst"]
    assert all(s["len"] == 1514 for s in added)     # 1518-byte frames without the FCS
    assert added[0]["mode_kw"]["count"] == 2 and added[1]["self_start"] is False
    assert calls[5][2] == -1    # bursts end by themselves: no duration
    parsed = ts.parse(res.stdout, "")
    assert parsed.error is None and len(parsed.sender_intervals) == 2
    assert parsed.bytes_sent == parsed.extra["opackets"] * 1514 and parsed.bytes_sent > 0
    assert sum(i.bytes for i in parsed.sender_intervals) <= parsed.bytes_sent
    assert not list(scratch.iterdir())    # the inline profile's temp file is removed


def test_runner_plan_files_and_sigterm(fake_trex, tmp_path, monkeypatch):
    trex, log = fake_trex
    monkeypatch.setenv("LH_FAKE_TREX_POLLS", "1000")
    plan = ts.launch_plan(str(trex), _streams(_flow(duration_s=30.0)), workdir=str(tmp_path), tag="bg",
                          duration_s=30.0, python=sys.executable)
    for path, text in plan.files.items():
        Path(path).write_text(text)
    proc = subprocess.Popen(plan.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        assert json.loads(first)["event"] == "start"
        proc.terminate()      # the trial's stop: traffic must be stopped on TRex, stats still printed
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    names = [c[0] for c in _calls(log)]
    assert "stop" in names and names[-1] == "disconnect"
    parsed = ts.parse(first + out, "")
    assert parsed.error is None and parsed.seconds > 0


def test_parse_runner_error():
    res = ts.parse('{"event": "error", "error": "TRexError: connection refused"}\n', "")
    assert res.error == "TRexError: connection refused" and res.bytes_sent == 0
    assert ts.parse("", "").error == "the TRex runner printed no final statistics"


# --------------------------------------------------------------------------- live

TREX_PATH = os.environ.get("LONGHAUL_TREX_PATH")


@pytest.mark.hardware
@pytest.mark.skipif(not TREX_PATH, reason="requires a TRex host (TRex cannot be installed on this machine); "
                    "set LONGHAUL_TREX_PATH to its release tree, with t-rex-64 -i running")
def test_live_trex_host(tmp_path):
    """On a TRex host: 5 s continuous at 100 Mb/s on port 0 through TRex's own client."""
    streams = _streams(_flow(duration_s=5.0), rate_mbps=100)
    plan = ts.launch_plan(TREX_PATH, streams, workdir=str(tmp_path), tag="live", duration_s=5.0,
                          python=sys.executable)
    for path, text in plan.files.items():
        Path(path).write_text(text)
    res = subprocess.run(plan.argv, capture_output=True, text=True, timeout=90, check=False)
    parsed = ts.parse(res.stdout, "")
    assert res.returncode == 0 and parsed.error is None, res.stdout + res.stderr
    assert parsed.extra["opackets"] > 0
    assert parsed.bytes_sent * 8 / 5.0 / 1e6 == pytest.approx(100, rel=0.1)
