"""A facility's transfer logs as one Trace: GridFTP server logs and simple CSV files, mixed freely.

Each file is read as
  - a GridFTP log (any line containing FTP_INFO or starting with DATE=): the -log-transfer file or
    the server's own log with its "Transfer stats:" lines (drivers/gridftp_log.py), or
  - a CSV whose header is start,end,bytes or start,end,bytes,class. Times are ISO-8601 (naive
    means UTC), epoch seconds, or the netlogger %Y%m%d%H%M%S.%f (14 digits before the point,
    which no epoch of this era has); class is od, be, on-demand or best-effort in any case, or blank.
Every line that is not a planned transfer becomes a Problem with its "file:line": malformed lines,
transfers of 0 bytes, and transfers the log says failed (CODE other than 226, failed=True). The
same GridFTP record read twice (a server's log and its transfer log both given) is planned once.
A server log's other lines (start-up, connections) are not transfers and are skipped
(gridftp_log.parse_log counts them).
The origin is the earliest planned start, floored to the second.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from longhaul.collectors.studies.planning.trace import BE, OD, Problem, Trace, TraceError, Transfer
from longhaul.drivers import gridftp_log

CSV_COLUMNS = ("start", "end", "bytes", "class")
CLASS_NAMES = {"od": OD, "on-demand": OD, "be": BE, "best-effort": BE}
SHOWN_PROBLEMS = 5          # in the error when nothing can be planned

_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", re.ASCII)
_COUNT = re.compile(r"\d+", re.ASCII)

# a transfer before the origin is chosen: (start, end, nbytes, class, where)
_Row = tuple[datetime, datetime, int, str | None, str]


def read_traces(paths: Iterable[Path], name: str | None = None) -> Trace:
    """All transfers in the files, in start order. TraceError if a file cannot be read or is of
    neither format, or if no file holds a transfer to plan (the error names the first problems)."""
    paths = [Path(p) for p in paths]
    if not paths:
        raise TraceError("no input files")
    rows: list[_Row] = []
    problems: list[Problem] = []
    seen: dict[tuple, str] = {}
    for path in paths:
        text = _text(path)
        if not text.strip():
            problems.append(Problem(str(path), "empty file"))
        elif is_gridftp(text):
            _gridftp(path, text, rows, problems, seen)
        else:
            _csv(path, text, rows, problems)
    if not rows:
        shown = "; ".join(f"{p.where}: {p.reason}" for p in problems[:SHOWN_PROBLEMS])
        more = f" (and {len(problems) - SHOWN_PROBLEMS} more)" if len(problems) > SHOWN_PROBLEMS else ""
        raise TraceError(f"no transfer to plan in {', '.join(map(str, paths))}"
                         + (f": {shown}{more}" if shown else ""))
    origin = min(r[0] for r in rows).replace(microsecond=0)
    transfers = [Transfer(start_s=(start - origin).total_seconds(), seconds=(end - start).total_seconds(),
                          nbytes=nbytes, cls=cls, where=where) for start, end, nbytes, cls, where in rows]
    return Trace(transfers, origin=origin, name=name or (paths[0].stem if len(paths) == 1 else "trace"),
                 problems=problems, sources=[str(p) for p in paths])


def is_gridftp(text: str) -> bool:
    return any("FTP_INFO" in line or line.startswith("DATE=") for line in text.splitlines())


def _text(path: Path) -> str:
    try:
        # file names in a log may be any bytes: a stray one must not lose the whole file
        return path.read_text(encoding="utf-8-sig", errors="replace")
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from None


def _gridftp(path: Path, text: str, rows: list[_Row], problems: list[Problem], seen: dict[tuple, str]) -> None:
    parsed = gridftp_log.parse_log(text)
    found = [(r.line, r) for r in parsed.records] + [(line, reason) for line, reason in parsed.problems]
    for line, item in sorted(found, key=lambda x: x[0]):
        where = f"{path}:{line}"
        if isinstance(item, str):
            problems.append(Problem(where, item))
            continue
        key = (item.start, item.end, item.nbytes, item.code, item.host, item.dest, item.file)
        if key in seen:
            problems.append(Problem(where, f"the same transfer as {seen[key]}"))
            continue
        seen[key] = where
        if not item.ok:
            problems.append(Problem(where, f"failed: CODE={item.code} after {item.nbytes} bytes", failed=True))
        elif item.nbytes == 0:
            problems.append(Problem(where, "0 bytes moved"))
        else:
            rows.append((item.start, item.end, item.nbytes, None, where))


def _csv(path: Path, text: str, rows: list[_Row], problems: list[Problem]) -> None:
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.strip())
    header = tuple(c.strip().lower() for c in next(csv.reader([lines[head]])))
    if header not in (CSV_COLUMNS[:3], CSV_COLUMNS):
        raise TraceError(f"{path}: unknown format: neither a GridFTP transfer log (no FTP_INFO line) nor a CSV "
                         f"with the header {','.join(CSV_COLUMNS[:3])}[,class] (its first line: {lines[head][:80]!r})")
    for lineno, line in enumerate(lines[head + 1:], head + 2):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            rows.append((*_csv_row(next(csv.reader([line])), len(header)), where))
        except ValueError as exc:
            problems.append(Problem(where, str(exc)))


def _csv_row(cells: list[str], width: int) -> tuple[datetime, datetime, int, str | None]:
    cells = [c.strip() for c in cells]
    if len(cells) == 3 and width == 4:
        cells.append("")            # a trailing empty class may be left out
    if len(cells) != width:
        raise ValueError(f"{len(cells)} fields, the header has {width}")
    start, end = parse_time(cells[0], "start"), parse_time(cells[1], "end")
    if end < start:
        raise ValueError(f"ends before it starts ({cells[1]} < {cells[0]})")
    if not _COUNT.fullmatch(cells[2]):
        raise ValueError(f"bytes is not a byte count: {cells[2]!r}")
    nbytes = int(cells[2])
    if nbytes == 0:
        raise ValueError("0 bytes moved")
    label = cells[3].lower() if width == 4 else ""
    if label and label not in CLASS_NAMES:
        raise ValueError(f"unknown class {cells[3]!r} (od, be, on-demand, best-effort or blank)")
    return start, end, nbytes, CLASS_NAMES.get(label)


def parse_time(value: str, what: str = "time") -> datetime:
    """ISO-8601 (naive: UTC), epoch seconds or %Y%m%d%H%M%S.%f, as an aware UTC datetime."""
    try:
        if re.fullmatch(r"\d{14}(\.\d+)?", value, re.ASCII):
            return gridftp_log.stamp(value[:21])        # at most 6 fraction digits
        if _NUMBER.fullmatch(value):
            return datetime.fromtimestamp(float(value), UTC)
        when = datetime.fromisoformat(value)
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"bad {what} {value!r}") from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
