#!/usr/bin/python3
"""longhaul-boot-kernel: which of the appliance image's kernels boots next.

    longhaul-boot-kernel --list        the kernels, which one is the default, which one runs
    longhaul-boot-kernel RELEASE       boot RELEASE (as `uname -r` names it) from the next boot on
    ... --root DIR                     act on another tree (an image being prepared, a test)

The image boots with extlinux: one LABEL per installed kernel, named by its release, and DEFAULT
the newest at build time (appliance/image/build.py writes the file with extlinux_conf() below).
Setting the default rewrites the DEFAULT line only, atomically (a temporary file beside it,
fsync, rename): a power cut leaves the old file or the new one, never half of one. A release
that has no LABEL, or whose kernel or initrd is gone, is refused with exit 2, naming the ones
there are. Exit 0 done, 2 a bad argument, 1 no extlinux.conf to act on.

Only the standard library: it runs on the appliance's own python3, outside longhaul's venv.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

CONF = Path("boot/extlinux/extlinux.conf")
HEADER = ("TIMEOUT 1", "PROMPT 0", "SERIAL 0 115200")


@dataclass(frozen=True)
class Entry:
    label: str
    linux: str
    initrd: str


def release_key(release: str) -> tuple:
    """Version order of kernel releases: 6.1.0-9-amd64 < 6.1.0-50-amd64 (not string order)."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"[.\-+~]", release))


def kernels_in(boot: Path) -> list[str]:
    """The releases that have both a kernel and an initrd in boot/, oldest first."""
    found = [p.name.removeprefix("vmlinuz-") for p in boot.glob("vmlinuz-*")]
    return sorted((r for r in found if (boot / f"initrd.img-{r}").is_file()), key=release_key)


def extlinux_conf(releases: list[str], append: str, default: str | None = None) -> str:
    """One LABEL per release (newest first), DEFAULT the newest unless told otherwise."""
    if not releases:
        raise ValueError("no kernel to boot")
    ordered = sorted(releases, key=release_key, reverse=True)
    default = default or ordered[0]
    if default not in ordered:
        raise ValueError(f"default {default!r} is not one of {ordered}")
    lines = [f"DEFAULT {default}", *HEADER]
    for release in ordered:
        lines += [f"LABEL {release}", f"  LINUX /boot/vmlinuz-{release}", f"  INITRD /boot/initrd.img-{release}",
                  f"  APPEND {append}"]
    return "\n".join(lines) + "\n"


def parse(text: str) -> tuple[list[Entry], str | None]:
    """The LABELs (with their kernel and initrd paths) and the DEFAULT of an extlinux.conf.
    Keywords are case-insensitive, as syslinux reads them."""
    entries: list[dict] = []
    default = None
    for line in text.splitlines():
        words = line.split(None, 1)
        if not words:
            continue
        key, value = words[0].upper(), (words[1].strip() if len(words) > 1 else "")
        if key == "DEFAULT" and not entries:
            default = value
        elif key == "LABEL":
            entries.append({"label": value, "linux": "", "initrd": ""})
        elif key in ("LINUX", "KERNEL", "INITRD") and entries:
            entries[-1]["initrd" if key == "INITRD" else "linux"] = value
    return [Entry(**e) for e in entries], default


def with_default(text: str, label: str) -> str:
    """text with its DEFAULT line (the one before the first LABEL) naming label; everything else
    is kept as it was."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        key = line.split(None, 1)[0].upper() if line.split() else ""
        if key == "LABEL":
            break
        if key == "DEFAULT":
            lines[i] = f"DEFAULT {label}\n"
            return "".join(lines)
    return f"DEFAULT {label}\n" + "".join(lines)


def write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.rename(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _present(root: Path, entry: Entry) -> bool:
    return all(p and (root / p.lstrip("/")).is_file() for p in (entry.linux, entry.initrd))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="longhaul-boot-kernel", description=__doc__.split("\n\n")[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--list", action="store_true", help="the kernels, the default and the running one")
    what.add_argument("release", nargs="?", help="the kernel release to boot from the next boot on")
    ap.add_argument("--root", type=Path, default=Path("/"), help="the tree to act on (default /)")
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    conf = args.root / CONF
    try:
        text = conf.read_text()
    except OSError as exc:
        print(f"longhaul-boot-kernel: {conf}: {exc.strerror}", file=sys.stderr)
        return 1
    entries, default = parse(text)
    if args.list:
        running = os.uname().release if args.root.resolve() == Path("/") else None
        for entry in entries:
            flags = [f for f, on in (("default", entry.label == default), ("running", entry.label == running),
                                     ("missing", not _present(args.root, entry))) if on]
            print(" ".join([entry.label, *flags]))
        return 0
    usable = [e.label for e in entries if _present(args.root, e)]
    if args.release not in usable:
        print(f"longhaul-boot-kernel: {args.release!r}: not a kernel of {conf}; "
              f"allowed: {', '.join(usable) or 'none'}", file=sys.stderr)
        return 2
    if args.release != default:
        write_atomic(conf, with_default(text, args.release))
    print(f"default kernel: {args.release} (was {default}); it boots from the next boot on")
    return 0


if __name__ == "__main__":
    sys.exit(main())
