"""A host's seed as TOML: the controller's writer of appliance/image/firstboot.py's format (the
reader runs on the host, with the standard library only, so it cannot import this)."""
from __future__ import annotations

import json


def _toml_value(value) -> str:
    if isinstance(value, str):
        return json.dumps(value)             # a TOML basic string is a JSON string for these
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return str(value)


def seed_toml(data: dict) -> str:
    """A seed dict as TOML (flat keys, arrays of tables for interfaces and routes)."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, list) or
             not v or not isinstance(v[0], dict)]
    for key, value in data.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            for table in value:
                lines += ["", f"[[{key}]]"] + [f"{k} = {_toml_value(v)}" for k, v in table.items() if v is not None]
    return "\n".join(lines) + "\n"
