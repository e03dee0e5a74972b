"""InfluxDB line protocol for the agents, escaped exactly as Telegraf's own serializer escapes.

    measurement,tag=value,tag=value field=1i,field=2.5,field="text" 1700000000000000000

The agents run on every lab host with nothing but the standard library loaded (the tcp_info probe
starts in ~50 ms; influxdb-client's Point would add ~0.4 s and ~40 MB to every probe, JSON mode
included, since imports stay at the top of the module). The rules, from Telegraf's
plugins/serializers/influx/escape.go and influx.go:

- measurement: `,` and space escaped with a backslash; tab, newline, form feed and carriage
  return written as `\\t`, `\\n`, `\\f`, `\\r` (line protocol has no raw line break);
- tag keys, tag values, field keys: the same, and `=` escaped too; a trailing backslash is dropped
  (it would escape the separator after it), and a tag whose key or value ends up empty is left out;
- string fields: in double quotes, `"` and `\\` escaped; newline and carriage return written as
  `\\n`, `\\r` (Telegraf would write them raw, but the run's spool is read line by line);
- integers with an `i` suffix, booleans as true/false, floats as Python's repr; None, NaN and
  infinities are left out (line protocol has none of them); a point without fields is no line.
"""

from __future__ import annotations

import math

_CONTROL = {"\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_NAME = str.maketrans({**_CONTROL, ",": "\\,", " ": "\\ "})
_KEY = str.maketrans({**_CONTROL, ",": "\\,", " ": "\\ ", "=": "\\="})
_STRING = str.maketrans({'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r"})


def escape_name(text: str) -> str:
    return str(text).translate(_NAME)


def escape_key(text: str) -> str:
    """A tag key, tag value or field key."""
    return str(text).translate(_KEY).rstrip("\\")


def field_value(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value}i"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    return '"' + str(value).translate(_STRING) + '"'


def line(measurement: str, tags: dict, fields: dict, time_ns: int | None = None) -> str | None:
    """One point as one line (no newline), tags sorted by key; None when no field has a value."""
    pairs = []
    for key, value in fields.items():
        encoded = field_value(value)
        name = escape_key(key)
        if encoded is not None and name:
            pairs.append(f"{name}={encoded}")
    if not pairs:
        return None
    head = escape_name(measurement)
    for key, value in sorted(tags.items()):
        if value is None:
            continue
        k, v = escape_key(key), escape_key(value)
        if k and v:
            head += f",{k}={v}"
    text = f"{head} {','.join(pairs)}"
    return text if time_ns is None else f"{text} {int(time_ns)}"
