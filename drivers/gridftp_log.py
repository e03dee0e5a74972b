"""The GridFTP server's transfer log: one netlogger record per transfer, KEY=VALUE pairs.

A Globus server with transfer logging (-log-transfer) writes lines like

    DATE=20190809091437.927804 HOST=dtn01 PROG=globus-gridftp-server NL.EVNT=FTP_INFO
    START=20190809091401.114002 USER=alice FILE=/data/run 7/part.h5 BUFFER=0 BLOCK=262144
    NBYTES=73400320000 VOLUME=/ STREAMS=4 STRIPES=1 DEST=[198.51.100.7] TYPE=RETR CODE=226

(one line in the file). DATE is when the transfer ended, START when it began, both
%Y%m%d%H%M%S.%f in UTC; CODE 226 is success, anything else a failure. The server's own log (at the
"transfer" level) carries the same record after a prefix: "[pid] <date> :: Transfer stats: DATE=...".

Values are not quoted and FILE and VOLUME may hold spaces, so a line is split before every
" KEY=" whose KEY is an uppercase token ([A-Z][A-Z0-9_.]*) or the one lowercase key Globus writes
(retrans, the per-stream retransmit counts). The one ambiguity: a FILE or VOLUME value that itself
holds a space followed by such a token and "=" (say "/data/x NOTE=1/f") is cut there. The format
gives no way to tell; the cut value is short and the stray key is kept as a field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

SUCCESS = 226
STAMP_FORMAT = "%Y%m%d%H%M%S.%f"

_KEY = r"(?:[A-Z][A-Z0-9_.]*|retrans)"
_SPLIT = re.compile(rf" (?={_KEY}=)")
_FIRST = re.compile(rf"{_KEY}=")
_STAMP = re.compile(r"\d{14}(?:\.\d{1,6})?", re.ASCII)
_COUNT = re.compile(r"\d+", re.ASCII)      # str.isdigit() takes "²", which int() refuses
# the server log's line prefix: "[pid] Sun Nov 22 11:57:54 2026 :: "
_SERVER_PREFIX = re.compile(r"^\[\d+\] .*? :: ")


def fields(line: str) -> dict[str, str]:
    """KEY=VALUE pairs of one record; anything before the first KEY= (the server log's prefix) is
    dropped. A repeated key keeps its last value."""
    line = line.rstrip("\r\n")
    start = next((m.start() for m in _FIRST.finditer(line) if m.start() == 0 or line[m.start() - 1] == " "), None)
    if start is None:
        return {}
    out: dict[str, str] = {}
    for piece in _SPLIT.split(line[start:]):
        key, _, value = piece.partition("=")
        out[key] = value
    return out


def stamp(value: str) -> datetime:
    """A netlogger time (%Y%m%d%H%M%S with up to 6 fraction digits) as an aware UTC datetime."""
    if not _STAMP.fullmatch(value):
        raise ValueError(f"not a {STAMP_FORMAT} time: {value!r}")
    # by hand: strptime is most of the time of reading a day's log
    v = value
    return datetime(int(v[0:4]), int(v[4:6]), int(v[6:8]), int(v[8:10]), int(v[10:12]), int(v[12:14]),
                    int(v[15:21].ljust(6, "0")) if len(v) > 15 else 0, tzinfo=UTC)


@dataclass(frozen=True)
class LogRecord:
    line: int               # 1-based line number in the text parsed
    start: datetime         # aware, UTC
    end: datetime           # aware, UTC (the record's DATE)
    nbytes: int
    code: int
    type: str | None = None     # RETR (sent), STOR/ESTO (received), ...
    streams: int | None = None
    host: str | None = None
    dest: str | None = None     # the peer's address, brackets removed
    file: str | None = None

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    @property
    def ok(self) -> bool:
        return self.code == SUCCESS


@dataclass
class ParsedLog:
    records: list[LogRecord] = field(default_factory=list)
    problems: list[tuple[int, str]] = field(default_factory=list)   # (line number, reason)
    ignored: int = 0        # server-log lines that are not transfer records (startup, connections, ...)
    server_log: bool = False


def is_candidate(line: str) -> bool:
    """Whether a line means to be a transfer record (in a server log, where most lines are not)."""
    return "FTP_INFO" in line or "Transfer stats:" in line or line.startswith("DATE=")


def record(fs: dict[str, str], lineno: int) -> LogRecord:
    """One record from its fields; ValueError says what is wrong with it."""
    event = fs.get("NL.EVNT")
    if event is not None and event != "FTP_INFO":
        raise ValueError(f"not a transfer record (NL.EVNT={event})")
    missing = [k for k in ("DATE", "START", "NBYTES", "CODE") if k not in fs]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    try:
        end = stamp(fs["DATE"])
    except ValueError:
        raise ValueError(f"bad DATE {fs['DATE']!r}") from None
    try:
        start = stamp(fs["START"])
    except ValueError:
        raise ValueError(f"bad START {fs['START']!r}") from None
    if end < start:
        raise ValueError(f"ends before it starts (DATE {fs['DATE']} < START {fs['START']})")
    if not _COUNT.fullmatch(fs["NBYTES"]):
        raise ValueError(f"NBYTES is not a byte count: {fs['NBYTES']!r}")
    if not _COUNT.fullmatch(fs["CODE"]):
        raise ValueError(f"CODE is not a reply code: {fs['CODE']!r}")
    streams = fs.get("STREAMS", "")
    return LogRecord(line=lineno, start=start, end=end, nbytes=int(fs["NBYTES"]), code=int(fs["CODE"]),
                     type=fs.get("TYPE") or None, streams=int(streams) if _COUNT.fullmatch(streams) else None,
                     host=fs.get("HOST") or None, dest=fs.get("DEST", "").strip("[]") or None,
                     file=fs.get("FILE"))


def parse_log(text: str) -> ParsedLog:
    """Every record, and every line that should have been one and is not.

    A pure transfer log (no server-log prefixes) holds nothing but records, so each non-blank line
    is a record or a problem. In a server log (any "[pid] ... :: " line) only the lines that mean
    to be records (is_candidate) are read; the others are counted in `ignored`."""
    lines = text.splitlines()
    out = ParsedLog(server_log=any(_SERVER_PREFIX.match(line) for line in lines))
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if out.server_log and not is_candidate(line):
            out.ignored += 1
            continue
        fs = fields(line)
        if not fs:
            out.problems.append((lineno, "not a KEY=VALUE transfer record"))
            continue
        try:
            out.records.append(record(fs, lineno))
        except ValueError as exc:
            out.problems.append((lineno, str(exc)))
    return out


def parse(text: str) -> tuple[list[LogRecord], list[tuple[int, str]]]:
    """(records, [(line number, reason)]) of a transfer log or server log; see parse_log."""
    parsed = parse_log(text)
    return parsed.records, parsed.problems
