"""Errors that decide longhaul's exit status: 2 for what the user wrote, 1 for a run that failed."""

from __future__ import annotations

from pathlib import Path


def format_keypath(keypath: tuple) -> str:
    out = ""
    for part in keypath:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


class ConfigError(Exception):
    """A bad configuration: names the file, line, key path, the bad value and what is allowed."""

    exit_status = 2

    def __init__(self, path, line, keypath: tuple, value, allowed: str):
        self.path = Path(path) if path is not None else None
        self.line = line
        self.keypath = tuple(keypath)
        self.value = value
        self.allowed = allowed
        super().__init__(self.render())

    @classmethod
    def option(cls, name: str | None, value, allowed: str) -> ConfigError:
        """A command-line option (or, with no name, the arguments as a whole) that cannot be used."""
        return cls(None, None, (name,) if name else (), value, allowed)

    def render(self) -> str:
        where = str(self.path) if self.path else "<arguments>"
        if self.line:
            where += f":{self.line}"
        key = format_keypath(self.keypath)
        if key:
            shown = "" if self.value is None else f" = {self.value!r}"
            return f"{where}: {key}{shown}: {self.allowed}"
        return f"{where}: {self.allowed}"


class SettingError(ValueError):
    """A value a component found wrong while resolving its own settings (a backend's inventory or
    image): the config loader turns it into a ConfigError at the key's line."""

    def __init__(self, keypath: tuple, value, allowed: str):
        self.keypath, self.value, self.allowed = tuple(keypath), value, allowed
        super().__init__(f"{'.'.join(map(str, keypath))} = {value!r}: {allowed}")


class PreflightError(Exception):
    """The machine cannot run what the config asks for (missing tool, feature or privilege)."""

    exit_status = 2


class RunError(Exception):
    """Something went wrong while running: the run is marked failed and exits 1."""

    exit_status = 1
