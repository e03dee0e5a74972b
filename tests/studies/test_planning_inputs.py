"""Reading a facility's transfer logs (drivers/gridftp_log.py, collectors/studies/planning/inputs.py):
Globus transfer-log lines as the format is written (spaces in FILE and VOLUME, failed transfers,
broken lines), the GridFTP outputs captured in tests/data/gridftp/, and CSV files."""
from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from longhaul.collectors.studies.planning.inputs import parse_time, read_traces
from longhaul.collectors.studies.planning.trace import BE, OD, TraceError
from longhaul.drivers import gridftp, gridftp_log

DATA = Path(__file__).parents[1] / "data" / "planning"
GRIDFTP = Path(__file__).parents[1] / "data" / "gridftp"
LOG = DATA / "dtn01.transfer.log"
SERVER = DATA / "dtn01.server.log"

LINE = ("DATE=20190809091437.927804 HOST=dtn01 PROG=globus-gridftp-server NL.EVNT=FTP_INFO "
        "START=20190809091401.114002 USER=alice FILE=/data/run 7/part.h5 BUFFER=0 BLOCK=262144 "
        "NBYTES=73400320000 VOLUME=/mnt/beam line STREAMS=4 STRIPES=1 DEST=[198.51.100.7] TYPE=RETR CODE=226")


# --------------------------------------------------------------------------- the log format


def test_fields_keep_spaces_in_file_and_volume():
    fs = gridftp_log.fields(LINE)
    assert fs["FILE"] == "/data/run 7/part.h5" and fs["VOLUME"] == "/mnt/beam line"
    assert fs["NL.EVNT"] == "FTP_INFO" and fs["DEST"] == "[198.51.100.7]" and fs["CODE"] == "226"
    assert list(fs)[:3] == ["DATE", "HOST", "PROG"] and len(fs) == 16


def test_fields_drop_the_server_log_prefix_and_keep_retrans():
    line = "[15755] Sun Nov 22 11:57:54 2026 :: Transfer stats: " + LINE + " TASKID=none retrans=0,3"
    fs = gridftp_log.fields(line)
    assert fs["DATE"] == "20190809091437.927804" and fs["TASKID"] == "none" and fs["retrans"] == "0,3"
    assert gridftp_log.fields("nothing here") == {}


def test_fields_the_documented_ambiguity():
    # an unquoted value holding " UPPER=" is cut there: no reader of this format can tell
    fs = gridftp_log.fields(LINE.replace("/data/run 7/part.h5", "/data/x NOTE=1/f"))
    assert fs["FILE"] == "/data/x" and fs["NOTE"] == "1/f"


def test_record_times_are_aware_utc():
    (rec,), problems = gridftp_log.parse(LINE)
    assert problems == []
    assert rec.start == datetime(2019, 8, 9, 9, 14, 1, 114002, tzinfo=UTC)
    assert rec.end == datetime(2019, 8, 9, 9, 14, 37, 927804, tzinfo=UTC)
    assert rec.seconds == pytest.approx(36.813802)
    assert (rec.nbytes, rec.code, rec.type, rec.streams, rec.host, rec.dest, rec.file, rec.line) == (
        73400320000, 226, "RETR", 4, "dtn01", "198.51.100.7", "/data/run 7/part.h5", 1)
    assert rec.ok


def test_transfer_log_every_line_is_a_record_or_a_problem():
    records, problems = gridftp_log.parse(LOG.read_text())
    assert [r.line for r in records] == [1, 2, 3, 5, 11]
    assert [(r.code, r.ok) for r in records if not r.ok] == [(550, False), (426, False)]
    assert records[1].file == "/data/run 7/part 2.h5"
    assert problems == [
        (6, "ends before it starts (DATE 20190809093100.000000 < START 20190809093200.000000)"),
        (7, "bad DATE '2019080909'"),
        (8, "NBYTES is not a byte count: '12k'"),
        (9, "missing START"),
        (10, "not a KEY=VALUE transfer record"),
    ]


def test_server_log_reads_only_transfer_lines_and_counts_the_rest():
    parsed = gridftp_log.parse_log(SERVER.read_text())
    assert parsed.server_log and parsed.ignored == 9
    assert [r.line for r in parsed.records] == [6, 10]
    assert parsed.problems == [(11, "missing NBYTES, CODE")]


def test_other_events_and_codes():
    assert gridftp_log.parse(LINE.replace("FTP_INFO", "FTP_ERROR"))[1] == [(1, "not a transfer record (NL.EVNT=FTP_ERROR)")]
    assert gridftp_log.parse(LINE.replace(" CODE=226", ""))[1] == [(1, "missing CODE")]
    assert gridftp_log.parse(LINE.replace("CODE=226", "CODE=x"))[1] == [(1, "CODE is not a reply code: 'x'")]
    assert gridftp_log.parse(LINE.replace("NBYTES=73400320000", "NBYTES=\u00b2"))[1] == [
        (1, "NBYTES is not a byte count: '\u00b2'")]
    # a stamp without the fraction is still a stamp
    assert gridftp_log.parse(LINE.replace("START=20190809091401.114002", "START=20190809091401"))[0][0].seconds \
        == pytest.approx(36.927804)


@pytest.mark.parametrize("name", ["mem_bytes_p8", "mem_dur_p16", "mem_dur_p1", "disk_bytes_p8"])
def test_captured_server_logs(name):
    parsed = gridftp_log.parse_log((GRIDFTP / f"{name}.server.txt").read_text())
    assert parsed.server_log and parsed.problems == [] and len(parsed.records) == 1
    rec = parsed.records[0]
    old = gridftp.parse_transfer_stats((GRIDFTP / f"{name}.server.txt").read_text())[0]
    assert (rec.nbytes, rec.code, rec.type, rec.streams, rec.file) == (
        old["bytes"], old["code"], old["type"], old["streams"], old["file"])
    assert rec.seconds == pytest.approx(old["seconds"]) and rec.dest == old["dest"] == "10.233.1.2"


def test_parse_transfer_stats_keeps_spaces_in_file_now():
    rec, = gridftp.parse_transfer_stats("[1] Fri Aug  9 09:14:37 2019 :: Transfer stats: " + LINE)
    assert rec["file"] == "/data/run 7/part.h5" and rec["bytes"] == 73400320000 and rec["seconds"] == 36.813802


# --------------------------------------------------------------------------- read_traces


def test_read_gridftp_transfer_log():
    trace = read_traces([LOG])
    assert trace.name == "dtn01.transfer" and trace.sources == [str(LOG)]
    assert trace.origin == datetime(2019, 8, 9, 9, 14, 1, tzinfo=UTC)      # floored to the second
    assert [t.where for t in trace.transfers] == [f"{LOG}:1", f"{LOG}:2", f"{LOG}:11"]
    first, second, last = trace.transfers
    assert first.start_s == pytest.approx(0.114002) and first.seconds == pytest.approx(36.813802)
    assert second.start_s == pytest.approx(39.25) and second.nbytes == 1048576000
    assert last.start_s == pytest.approx(53099.0) and last.cls is None and not trace.labelled()
    assert trace.failed == 2 and trace.malformed == 5
    failed = [p for p in trace.problems if p.failed]
    assert [(p.where, p.reason) for p in failed] == [
        (f"{LOG}:3", "failed: CODE=550 after 0 bytes"), (f"{LOG}:5", "failed: CODE=426 after 52428800000 bytes")]
    assert [p.where for p in trace.problems] == [f"{LOG}:{n}" for n in (3, 5, 6, 7, 8, 9, 10)]


def test_read_server_log_and_transfer_log_of_one_server_plans_each_transfer_once():
    trace = read_traces([LOG, SERVER], name="dtn01")
    assert trace.name == "dtn01" and len(trace.transfers) == 4
    dup = [p for p in trace.problems if p.where == f"{SERVER}:6"]
    assert dup[0].reason == f"the same transfer as {LOG}:1" and not dup[0].failed
    assert any(p.where == f"{SERVER}:11" and p.reason == "missing NBYTES, CODE" for p in trace.problems)


def test_read_captured_gridftp_outputs():
    servers = sorted(GRIDFTP.glob("*.server.txt"))
    trace = read_traces(servers)
    assert len(trace.transfers) == 4 and trace.problems == []
    assert sorted(t.nbytes for t in trace.transfers) == [40_000_000, 60_000_000, 68_586_294, 128_751_270]
    assert trace.origin == datetime(2026, 11, 22, 11, 57, 49, tzinfo=UTC)
    assert trace.transfers[0].start_s == pytest.approx(0.892102)
    both = read_traces([GRIDFTP / "mem_bytes_p8.server.txt", GRIDFTP / "mem_bytes_p8.transfer.log"])
    assert len(both.transfers) == 1 and both.malformed == 1


def test_read_csv_with_class():
    path = DATA / "flows.csv"
    trace = read_traces([path])
    assert trace.origin == datetime(2019, 8, 9, 9, 0, tzinfo=UTC)
    got = [(t.start_s, t.seconds, t.nbytes, t.cls, t.where) for t in trace.transfers]
    assert got == [
        (0.0, 10.0, 1250000000, OD, f"{path}:2"),
        (5.0, 20.5, 2500000000, BE, f"{path}:3"),
        (30.5, 30.0, 1000, OD, f"{path}:4"),
        (60.0, 60.0, 7500000000, BE, f"{path}:5"),
        (60.0, 30.0, 300, None, f"{path}:6"),        # +02:00 is read as 09:01 UTC; blank class
    ]
    assert [(p.where, p.reason) for p in trace.problems] == [
        (f"{path}:8", "ends before it starts (2019-08-09T09:02:00Z < 2019-08-09T09:03:00Z)"),
        (f"{path}:9", "unknown class 'urgent' (od, be, on-demand, best-effort or blank)"),
        (f"{path}:10", "bad start 'yesterday'"),
        (f"{path}:11", "0 bytes moved"),
        (f"{path}:12", "bytes is not a byte count: '1e6'"),
        (f"{path}:13", "2 fields, the header has 4"),
    ]


def test_read_csv_without_class_and_mixed_with_a_log():
    noclass = DATA / "flows_noclass.csv"
    trace = read_traces([noclass])
    assert [(t.start_s, t.seconds, t.cls) for t in trace.transfers] == [(0.0, 60.0, None), (30.0, 60.0, None)]
    assert trace.origin == datetime.fromtimestamp(1565340000, UTC)
    mixed = read_traces([LOG, noclass, DATA / "flows.csv"])
    assert len(mixed.transfers) == 3 + 2 + 5 and len(mixed.sources) == 3 and mixed.name == "trace"
    assert mixed.origin == datetime.fromtimestamp(1565340000, UTC)          # 08:40, the CSV's first
    assert mixed.transfers[0].where == f"{noclass}:2"
    assert min(t.start_s for t in mixed.transfers) == 0.0
    assert mixed.failed == 2 and mixed.malformed == 5 + 6


def test_parse_time_forms():
    want = datetime(2019, 8, 9, 9, 14, 1, 500000, tzinfo=UTC)
    for value in ("2019-08-09T09:14:01.5Z", "2019-08-09 09:14:01.500", "2019-08-09T11:14:01.5+02:00",
                  "1565342041.5", "20190809091401.5", "20190809091401.500000"):
        assert parse_time(value) == want, value
    with pytest.raises(ValueError, match="bad end"):
        parse_time("9999999999999999999999", "end")


def test_nothing_to_plan_names_files_and_problems(tmp_path):
    bad = tmp_path / "bad.log"
    bad.write_text("\n".join(LINE.replace("CODE=226", f"CODE={c}") for c in (550, 426, 451, 530, 550, 550, 426)))
    with pytest.raises(TraceError) as err:
        read_traces([bad])
    msg = str(err.value)
    assert msg.startswith(f"no transfer to plan in {bad}: {bad}:1: failed: CODE=550")
    assert f"{bad}:5" in msg and f"{bad}:6" not in msg and "(and 2 more)" in msg
    empty = tmp_path / "empty.csv"
    empty.write_text("start,end,bytes\n\n")
    with pytest.raises(TraceError, match=f"no transfer to plan in {empty}$"):
        read_traces([empty])
    blank = tmp_path / "blank.log"
    blank.write_text("\n")
    with pytest.raises(TraceError, match="empty file"):
        read_traces([blank])


def test_unreadable_or_unknown_files(tmp_path):
    with pytest.raises(TraceError, match="no input files"):
        read_traces([])
    with pytest.raises(TraceError, match=r"cannot read .*nope\.log"):
        read_traces([tmp_path / "nope.log"])
    with pytest.raises(TraceError, match="mem_bytes_p8.client.txt: unknown format"):
        read_traces([LOG, GRIDFTP / "mem_bytes_p8.client.txt"])
    other = tmp_path / "other.csv"
    other.write_text("when,size\n1,2\n")
    with pytest.raises(TraceError, match="other.csv: unknown format.*'when,size'"):
        read_traces([other])
