"""Sizes as people write them in config files: bytes, '6MB', '4MiB', '400p' (packets), '1bdp'."""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*$")
_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9,
               "kib": 2**10, "mib": 2**20, "gib": 2**30}

def parse_size(value) -> int:
    """A data size in bytes from an int or '2GB', '500MiB', '1e9'-free text such as '1500000000'."""
    match = _SIZE.match(str(value)) if not isinstance(value, bool) else None
    unit = match.group(2).lower() if match else None
    if unit not in _SIZE_UNITS:
        raise ValueError("bytes (2000000000) or a size with unit (2GB, 500MiB)")
    scaled = float(match.group(1)) * _SIZE_UNITS[unit]
    if not scaled < 2**63:               # 400 digits make float inf, which int() cannot take
        raise ValueError("a size below 2^63 bytes")
    if int(scaled) <= 0:
        raise ValueError("a size above zero")
    return int(scaled)


def parse_queue(value, bdp_bytes: float, mtu: int) -> int:
    """Queue size in bytes from bytes (int), '6MB', '400p' (packets of one MTU) or '1.0bdp'."""
    if isinstance(value, bool):
        raise ValueError("a size, not a boolean")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE.match(str(value))
        if not match:
            raise ValueError("bytes (6000000), a size with unit (6MB, 4MiB), packets (400p) or a BDP multiple (1bdp)")
        number, unit = float(match.group(1)), match.group(2).lower()
        if unit in ("p", "pkt", "pkts", "packets"):
            size = number * mtu
        elif unit == "bdp":
            size = number * bdp_bytes
        elif unit in _SIZE_UNITS:
            size = number * _SIZE_UNITS[unit]
        else:
            raise ValueError(f"unknown unit {unit!r}: use B, KB, MB, GB, KiB, MiB, GiB, p or bdp")
    size = int(size)
    if size < 2 * mtu:
        raise ValueError(f"the queue must hold at least two packets ({2 * mtu} bytes)")
    return size
