"""What longhaul sends to a remote login shell: argv quoted once, a fixed script that execs the
tool in its own process group, and the watcher that ends that group with the session.

Quoting happens once, at the SSH boundary: argv stays a list until shlex.join makes the one string
the remote login shell parses (`$SHELL -c STRING`, so that shell must be POSIX: sh, bash, dash, ksh,
zsh). The string execs /bin/sh with a fixed script and the argv as "$@", so no argument is ever
re-parsed.

Remote cleanup, as thorough as locally: sshd runs every session command in a new session (it calls
setsid() before exec'ing the shell), the script execs the tool in place, so the tool's pid P is its
process group and everything it starts stays in group P. Before exec'ing, the script forks a small
watcher that holds the SSH session's stdin. The local side never writes to it; it reads EOF when
the session ends for any reason: the local ssh client killed (a client of a shared connection
too: its master then closes the session), the controller killed (the pipe's
write end dies with it), a run() that timed out. The watcher then sends TERM to group P, waits up
to `grace_s` and sends KILL (the watcher ignores TERM and dies by that KILL). start() also learns P
(the script announces it on stderr; the line is removed from the stderr the caller sees), so stop()
signals the remote group over a second SSH connection, TERM then KILL like a local stop, and
cleanup() does that for every group this executor started and has not seen end. As locally, a
tool that makes its own session (a daemon) escapes its group: run such tools in the foreground.
"""

from __future__ import annotations

import re
import shlex

MARKER = "__longhaul_pgid__"
MARKER_RE = re.compile(rb"^" + MARKER.encode() + rb" (\d+)\r?\n?$")

# fd 3 keeps the session's stdin for the watcher; the tool gets /dev/null (as Executor.start gives
# a local tool) and does not inherit fd 3. The watcher's output goes to /dev/null so it never
# holds the session's stdout/stderr open: the session ends when the tool ends.
WATCHED = """exec 3<&0 </dev/null
( trap '' TERM INT HUP
  read x <&3
  kill -s TERM 0 2>/dev/null
  i=0
  while [ $i -lt {grace} ] && kill -0 $$ 2>/dev/null; do sleep 1; i=$((i+1)); done
  kill -s KILL 0 ) </dev/null >/dev/null 2>&1 &
{announce}exec "$@" 3<&-"""
# run() with input: the tool reads the session's stdin itself, so no watcher can hold it; the
# announced group is killed over a second connection if the run times out.
PLAIN = '{announce}exec "$@"'
ANNOUNCE = f'echo "{MARKER} $$" >&2\n'
SIGNAL_GROUPS = 'sig=$1; shift; for g do kill -s "$sig" -- "-$g" 2>/dev/null || kill -s "$sig" "$g" 2>/dev/null; done; exit 0'


def remote_command(argv: list[str], watch: bool = True, announce: bool = False, grace_s: int = 5) -> str:
    """The one string sent to the remote login shell: the only place argv is quoted."""
    template = WATCHED if watch else PLAIN
    script = template.format(grace=int(grace_s), announce=ANNOUNCE if announce else "")
    return shlex.join(["exec", "/bin/sh", "-c", script, "longhaul", *[str(a) for a in argv]])


def map_paths(argv: list[str], path_map: tuple[tuple[str, str], ...]) -> list[str]:
    """Controller install paths (its venv's python, its built helpers) as the host's: a prefix
    at the start of an argument or right after a `KEY=` (LD_PRELOAD=...)."""
    if not path_map:
        return argv
    out = []
    for arg in argv:
        key, eq, value = arg.partition("=") if not arg.startswith("/") else ("", "", arg)
        target = value if (eq or not key) else arg
        for local, remote in path_map:
            if target.startswith(local):
                target = remote + target[len(local):]
                break
        out.append(f"{key}={target}" if eq else target)
    return out



def announced_pgid(err: bytes) -> int | None:
    for line in err.splitlines():
        match = MARKER_RE.match(line)
        if match:
            return int(match.group(1))
    return None
