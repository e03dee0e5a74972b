"""The fake lab's processes and how it knows a command (tests/support/fakes.py): `program(argv)`
names what a command runs, and a FakeProcess stands for a started one."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

INLINE_PYTHON = "python -c"     # an inline Python program: `python -c CODE ...`
PIDS = itertools.count(50_000)


def program(argv: list[str]) -> str:
    """What a command runs, which is what the fakes answer by: a Python agent's module
    (`python -m M`), an inline Python program (INLINE_PYTHON), a named shell script's name
    (`sh -c SCRIPT NAME ...`), what `env VAR=value ...` runs, else the executable's file name."""
    if argv and Path(argv[0]).name == "env":
        rest = list(argv[1:])
        while rest and "=" in rest[0] and not rest[0].startswith("-"):
            rest.pop(0)
        return program(rest) if rest else "env"
    if len(argv) > 2 and argv[1] == "-m":
        return argv[2]
    if len(argv) > 2 and argv[1] == "-c" and Path(argv[0]).name.startswith("python"):
        return INLINE_PYTHON
    if argv[:2] == ["sh", "-c"] and len(argv) > 3:
        return argv[3]
    return Path(argv[0]).name


class FakeProcess:
    """Process's interface (hardware/executors/process.py) without a process: output is written
    to its files when it starts; it ends after `runs_s` or when stopped."""

    def __init__(self, argv: list[str], host: str, label: str, stdout: Path | None, stderr: Path | None,
                 runs_s: float = 0.0, output: str = ""):
        self.argv, self.host, self.label = argv, host, label
        self.stdout_path, self.stderr_path = stdout, stderr
        self.pid = next(PIDS)
        self.started = time.monotonic()
        self._ends = self.started + runs_s
        self._code: int | None = None
        for path, text in ((stdout, output), (stderr, "")):
            if path is not None:
                Path(path).write_text(text)

    def poll(self) -> int | None:
        if self._code is None and time.monotonic() >= self._ends:
            self._code = 0
        return self._code

    def wait(self, timeout: float | None = None) -> int:
        return self.poll() if self.poll() is not None else self.stop()

    def stop(self, term_timeout: float = 3.0, kill_timeout: float = 3.0, sig: int = 15) -> int | None:
        if self.poll() is None:
            self._code = -int(sig)
        return self._code

    def read_stdout(self) -> str:
        return self.stdout_path.read_text() if self.stdout_path and self.stdout_path.exists() else ""

    def read_stderr(self) -> str:
        return self.stderr_path.read_text() if self.stderr_path and self.stderr_path.exists() else ""
