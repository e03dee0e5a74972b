"""NFS flows (drivers/nfs.py, nfs_server.py, nfs_client.py): argv, config, the portmapper stub and
the parser on real captures (tests/data/nfs/README.md). The lab run of ganesha and the windowed
writer is tests/drivers/test_nfs_lab.py's.
"""
from __future__ import annotations

import json
import math
import socket
import struct
from pathlib import Path, PurePosixPath
from types import SimpleNamespace

import pytest

from longhaul.drivers import nfs, nfs_client, nfs_server
from longhaul.drivers.tool import BurstSpec

DATA = Path(__file__).resolve().parents[1] / "data" / "nfs"


def read(name: str) -> str:
    return (DATA / name).read_text()


def spec(**kw) -> BurstSpec:
    base = {"receiver": "D1", "port": 5201, "duration_s": None, "bytes": None, "workdir": PurePosixPath("/w/b0"),
            "options": {"clients": 2, "file_bytes": 50_000_000}}
    base.update(kw)
    return BurstSpec(**base)


# ------------------------------------------------------------------------------ driver argv

def test_tool_shape():
    tool = nfs.Nfs()
    assert tool.name == "nfs" and tool.shared_servers is False and tool.sets_cca is False
    assert set(tool.executables) == {"ganesha.nfsd", str(nfs_client.helper_path())}
    assert nfs_client.helper_path().name == "longhaul-nfswrite"


def test_server_spec():
    s = nfs.Nfs().server(spec())
    assert s.argv[1:] == ["-m", "longhaul.drivers.nfs_server", "--workdir", "/w/b0", "--port", "5201",
                          "--bind", "D1", "--mount-port", "15201"]
    assert s.ready == ["grep", "-s", "-m1", "NFS SERVER INITIALIZED", "/w/b0/nfs-5201/ganesha.log"]
    assert s.cleanup == [["rm", "-rf", "--", "/w/b0/nfs-5201/export"]]
    custom = nfs.Nfs().server(spec(options={"bind": "10.0.0.2", "mount_port": 7000}))
    assert custom.argv[-4:] == ["--bind", "10.0.0.2", "--mount-port", "7000"]


def test_client_argv_sized_burst():
    argv = nfs.Nfs().client(spec(bytes=200_000_000))
    assert argv[1:] == ["-m", "longhaul.drivers.nfs_client", "--server", "D1", "--port", "5201",
                        "--mount-port", "15201", "--clients", "2", "--file-bytes", "50000000",
                        "--iterations", "2"]
    windowed = nfs.Nfs().client(spec(bytes=200_000_000, options={"clients": 2, "window": 1 << 20}))
    assert windowed[-2:] == ["--window", "1048576"]


def test_window_option_is_checked_with_the_config():
    flow = SimpleNamespace(file_bytes=10**9, bytes=None, options={"window": 8 << 20})
    assert nfs._check_flow(flow) is None
    for bad in (100, 2**31, "8MB", 1.5, True):
        flow.options["window"] = bad
        assert "options.window" in nfs._check_flow(flow), bad


def test_writer_argv():
    url = nfs_client.copy_url("D1", 5201, 15201, "c0-1-0.bin")
    assert nfs_client.write_argv(10**9, url) == [str(nfs_client.helper_path()), "--bytes", "1000000000", url]
    assert nfs_client.write_argv(5, url, 1 << 20)[2:5] == ["5", "--window", "1048576"]


def test_client_argv_timed_burst():
    argv = nfs.Nfs().client(spec(duration_s=30.0, options={"clients": 16}))
    assert argv[argv.index("--file-bytes") + 1] == "1000000000"       # the paper's 1 GB
    assert argv[argv.index("--iterations") + 1] == "0"                # until the duration ends
    assert argv[-2:] == ["--duration", "30"]


@pytest.mark.parametrize("kw, expected", [
    ({"bytes": 10**9, "options": {"clients": 4}}, (4, 250_000_000, 1)),            # one round
    ({"bytes": 10**9, "options": {"clients": 2, "file_bytes": 3 * 10**8}}, (2, 300_000_000, 2)),
    ({"bytes": 10**9, "options": {"clients": 1, "file_bytes": 10**8, "iterations": 3}}, (1, 10**8, 3)),
    ({"duration_s": 5.0, "options": {}}, (1, 10**9, 0)),
])
def test_plan(kw, expected):
    assert nfs.plan(spec(**kw)) == expected


def test_client_rejects_udp_and_bad_plans():
    with pytest.raises(ValueError):
        nfs.client_argv(spec(bytes=1000, protocol="udp"))
    with pytest.raises(ValueError):
        nfs.plan(spec(bytes=1000, options={"clients": 0}))


# ------------------------------------------------------------------------------ server side

def test_config_text_matches_the_one_ganesha_served():
    text = nfs_server.config_text("/tmp/lhtnfs-manual/w3", 20490, "10.235.1.2", 30490)
    assert text == read("ganesha.conf")
    assert "Protocols = 3, 4;" in text and "Enable_NLM = false;" in text and "Enable_UDP = false;" in text
    v4only = nfs_server.config_text("/x", 1, "::1", 2, protocols=(4,))
    assert v4only.count("Protocols = 4;") == 2 and "Bind_addr = ::1;" in v4only


def test_paths_and_ganesha_argv():
    p = nfs_server.paths("/w", 9)
    assert p["export"] == "/w/nfs-9/export" and p["log"] == "/w/nfs-9/ganesha.log"
    assert nfs_server.ganesha_argv("/w", 9) == ["ganesha.nfsd", "-F", "-f", "/w/nfs-9/ganesha.conf",
                                                "-L", "/w/nfs-9/ganesha.log", "-p", "/w/nfs-9/ganesha.pid",
                                                "-N", "NIV_EVENT"]


def test_resolve_bind():
    assert nfs_server.resolve_bind("10.1.2.3") == "10.1.2.3"
    assert nfs_server.resolve_bind("fd00::2") == "fd00::2"
    assert nfs_server.resolve_bind("localhost") == "127.0.0.1"
    assert nfs_server.resolve_bind("no-such-host.invalid") == "0.0.0.0"


def _captured_calls() -> list[tuple[bytes, bytes]]:
    rows = [line.split() for line in read("ganesha_rpcbind_calls.hex").splitlines() if line.strip()]
    return [(bytes.fromhex(call), bytes.fromhex(reply)) for call, reply in rows]


def test_portmap_stub_answers_what_ganesha_sent():
    table: dict = {}
    calls = _captured_calls()
    procs = [struct.unpack_from(">I", call, 20)[0] for call, _ in calls]
    assert set(procs) == {1, 2} and procs.count(1) == 8          # SET of NFS v3/v4, MOUNT v1/v3 (tcp, tcp6)
    for n, (call, captured) in enumerate(calls):
        reply = nfs_server.portmap_reply(call, table)
        assert reply == captured
        xid, mtype, accepted, _flavor, _len, status, result = struct.unpack(">7I", reply)
        assert (xid, mtype, accepted, status, result) == (struct.unpack_from(">I", call)[0], 1, 0, 0, 1)
        if n == procs.index(1):                                   # after ganesha's first SET
            assert table == {(100003, 3, "tcp"): "0.0.0.0.80.10"}   # universal address: port 20490 = 80 * 256 + 10
    assert table == {}                                            # ganesha unset everything on SIGTERM


def test_portmap_stub_serves_a_unix_socket(tmp_path):
    """As ganesha reaches it: a record-marked RPC over the stub's unix socket."""
    path = str(tmp_path / "rpcbind.sock")
    stub = nfs_server.PortmapStub(unix_path=path)
    try:
        call, captured = next((c, r) for c, r in _captured_calls() if struct.unpack_from(">I", c, 20)[0] == 1)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(5)
            conn.connect(path)
            conn.sendall(struct.pack(">I", 0x80000000 | len(call)) + call)
            assert nfs_server._read_record(conn) == captured
        assert list(stub.table) == [(100003, 3, "tcp")]
    finally:
        stub.close()
    assert not Path(path).exists()


def _call(prog: int, vers: int, proc: int, args: bytes = b"") -> bytes:
    return struct.pack(">6I", 7, 0, 2, prog, vers, proc) + struct.pack(">4I", 0, 0, 0, 0) + args


def test_portmap_stub_lookups_and_refusals():
    table = {(100005, 3, "tcp"): "10.0.0.2.117.18", (100003, 3, "tcp"): 2049}
    getport = nfs_server.portmap_reply(_call(100000, 2, 3, struct.pack(">4I", 100003, 3, 6, 0)), table)
    assert struct.unpack(">7I", getport)[5:] == (0, 2049)
    getaddr = nfs_server.portmap_reply(_call(100000, 4, 3, struct.pack(">2I", 100005, 3)
                                             + nfs_server._pack_string(b"tcp") + nfs_server._pack_string(b"")
                                             + nfs_server._pack_string(b"")), table)
    assert nfs_server._xdr_string(getaddr, 24)[0] == b"10.0.0.2.117.18"
    assert struct.unpack(">6I", nfs_server.portmap_reply(_call(100003, 3, 0), table))[5] == 1   # PROG_UNAVAIL
    assert struct.unpack(">8I", nfs_server.portmap_reply(_call(100000, 5, 0), table))[5:] == (2, 2, 4)
    assert struct.unpack(">6I", nfs_server.portmap_reply(_call(100000, 4, 9), table))[5] == 3   # PROC_UNAVAIL
    assert nfs_server.portmap_reply(b"\0" * 8, table) is None


def test_stale_copies_keep_each_clients_newest():
    names = ["c0-77-0.bin", "c0-77-1.bin", "c0-77-2.bin", "c1-77-0.bin", "c1-88-0.bin", "other.txt"]
    assert sorted(nfs_server.stale_copies(names)) == ["c0-77-0.bin", "c0-77-1.bin"]
    assert nfs_server.COPY_NAME.match(nfs_client.file_name(12, "348699473", 3))


# ------------------------------------------------------------------------------ client side

def test_copy_url():
    assert nfs_client.copy_url("D1", 5201, 15201, "c0-1-0.bin") == \
        "nfs://D1/export/c0-1-0.bin?version=3&nfsport=5201&mountport=15201"
    assert nfs_client.copy_url("fd00::2", 1, 2, "x").startswith("nfs://[fd00::2]/export/x?")


def test_client_cli_needs_an_end_and_a_sane_window():
    base = ["--server", "x", "--port", "1", "--mount-port", "2", "--file-bytes", "10"]
    with pytest.raises(SystemExit):
        nfs_client.main(base)
    with pytest.raises(SystemExit):
        nfs_client.main([*base, "--iterations", "1", "--window", "100"])


def _fake_writer(tmp_path, monkeypatch, body: str) -> None:
    """A stand-in for longhaul-nfswrite with the same argv and last lines (the real one is run by
    the lab tests below): what nfs_client does with copies that finish, fail or are stopped."""
    writer = tmp_path / "nfswrite"
    writer.write_text("#!/bin/sh\n" + body)
    writer.chmod(0o755)
    monkeypatch.setenv("LONGHAUL_NFSWRITE", str(writer))


def _client_lines(capsys, argv) -> tuple[int, list[dict]]:
    rc = nfs_client.main(["--server", "x", "--port", "1", "--mount-port", "2", *argv])
    return rc, [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_client_runs_the_writer_per_copy_with_its_window(tmp_path, monkeypatch, capsys):
    # the writer echoes its argv's --bytes back as nfs-cp's "copied N bytes" line
    _fake_writer(tmp_path, monkeypatch, 'echo "$@" >> "$0.argv"; echo "copied $2 bytes"\n')
    rc, lines = _client_lines(capsys, ["--clients", "2", "--file-bytes", "5000", "--iterations", "2",
                                       "--window", "1048576"])
    assert rc == 0
    copies = [o["copy"] for o in lines if "copy" in o]
    assert len(copies) == 4 and all(c["complete"] and c["bytes"] == 5000 for c in copies)
    assert lines[-1]["summary"]["bytes"] == 20000 and lines[0]["start"]["window"] == 1048576
    argv = (tmp_path / "nfswrite.argv").read_text().splitlines()
    assert len(argv) == 4 and all(a.startswith("--bytes 5000 --window 1048576 nfs://x/export/c") for a in argv)


def test_client_reports_a_short_write_as_failed_and_a_stopped_one_by_what_was_acknowledged(
        tmp_path, monkeypatch, capsys):
    _fake_writer(tmp_path, monkeypatch, 'echo "copied 17 bytes"\n')
    rc, lines = _client_lines(capsys, ["--file-bytes", "5000", "--iterations", "3"])
    copies = [o["copy"] for o in lines if "copy" in o]
    assert rc == 1 and len(copies) == 1 and copies[0]["failed"] and not copies[0]["complete"]
    # stopped at the deadline: the writer says how far the server acknowledged, on its way out
    _fake_writer(tmp_path, monkeypatch, 'trap \'kill $!; echo "stopped after 4096 bytes"; exit 3\' TERM\n'
                                        'sleep 30 >/dev/null 2>&1 & wait\n')
    rc, lines = _client_lines(capsys, ["--file-bytes", "5000", "--duration", "0.5"])
    assert rc == 0
    copies = [o["copy"] for o in lines if "copy" in o]
    assert len(copies) == 1 and copies[0]["complete"] is False and copies[0]["partial_bytes"] == 4096
    assert {"client": 0, "iteration": 0, "bytes": 4096} in [o["partial"] for o in lines if "partial" in o]
    assert lines[-1]["summary"]["partial_bytes"] == 4096


# ------------------------------------------------------------------------------ parser

def test_parse_iterations():
    r = nfs.parse(read("client_iter.out"), read("server_iter.out"), spec(cca="cubic"))
    assert r.error is None and r.protocol == "tcp" and r.cca == "cubic" and r.streams == 2
    assert r.bytes_sent == r.bytes_received == 200_000_000
    assert r.remote_port == 20490 and math.isclose(r.seconds, 4.325266 - 0.001513, abs_tol=1e-6)
    rows = r.extra["iterations"]
    assert [row["iteration"] for row in rows] == [0, 1] and all(row["copies"] == 2 for row in rows)
    assert rows[0]["per_client_mbps"] == {"0": 191.923, "1": 183.491}     # 50e6 * 8 / 2.084172 s ...
    assert math.isclose(rows[0]["mean_mbps"], (191.923 + 183.491) / 2, abs_tol=1e-3)
    assert math.isclose(rows[1]["sum_mbps"], 184.298 + 186.882, abs_tol=1e-3)
    # per-second view: the copies' bytes spread over their spans; all of it lands somewhere
    assert abs(sum(i.bytes for i in r.receiver_intervals) - 200_000_000) <= 10
    assert [i.end_s for i in r.receiver_intervals][:4] == [1.0, 2.0, 3.0, 4.0]
    assert all(len(i.streams) == 2 for i in r.receiver_intervals)
    assert 300 < r.receiver_intervals[1].bytes * 8 / 1e6 < 420                 # the 400 Mbit shaper


def test_parse_timed_burst_with_stopped_copies():
    r = nfs.parse(read("client_duration.out"), "", spec())
    assert r.error is None
    assert r.extra["complete"] == 3 and r.extra["incomplete"] == 3
    partial = 9_437_184 + 9_437_184 + 3_145_728
    assert r.bytes_received == 120_000_000 + partial
    assert abs(sum(i.bytes for i in r.receiver_intervals) - r.bytes_received) <= 10
    assert len(r.extra["iterations"]) == 1                     # only complete copies make an iteration
    stopped = [c for c in r.extra["copies"] if not c["complete"]]
    assert sorted(c["partial_bytes"] for c in stopped) == [3_145_728, 9_437_184, 9_437_184]


def test_parse_copies_the_writer_stopped_at_the_deadline():
    r = nfs.parse(read("client_stopped_writer.out"), "", spec())
    assert r.error is None and r.extra["complete"] == 0 and r.extra["incomplete"] == 2
    assert r.bytes_received == 2 * 4_194_304                     # what the server acknowledged
    assert abs(sum(i.bytes for i in r.receiver_intervals) - r.bytes_received) <= 10
    # 8.4 MB in 1.6 s through the 50 Mbit shaper of the capture
    assert 35 < r.bytes_received * 8 / r.seconds / 1e6 < 51


def test_parse_failed_copies_and_garbage():
    r = nfs.parse(read("client_noserver.out"), "", spec())
    assert r.error.startswith("2 of 2 copies failed: Failed to mount nfs share")
    assert r.bytes_received == 0 and r.receiver_intervals == []
    with pytest.raises(ValueError):
        nfs.parse("iperf3: error\n", "", spec())
    cut = "\n".join(read("client_iter.out").splitlines()[:-1])       # client killed before its summary
    assert "without its summary" in nfs.parse(cut, "", spec()).error
