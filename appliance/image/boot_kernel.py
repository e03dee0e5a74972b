#!/usr/bin/python3
"""longhaul-boot-kernel: which of the appliance image's kernels boots next.

    longhaul-boot-kernel --list        the kernels, which one is the default, which one runs
    longhaul-boot-kernel RELEASE       boot RELEASE (as `uname -r` names it) from the next boot on
    ... --root DIR                     act on another tree (an image being prepared, a test)

The image boots with GRUB whatever the firmware: legacy BIOS loads GRUB's own core image, UEFI
(with or without Secure Boot) Debian's signed shim and GRUB; both read the one
/boot/grub/grub.cfg that appliance/image/build.py writes with grub_cfg() below: one menuentry per
installed kernel, its id the release, and `set default` the newest at build time. Setting the
default rewrites that line only, atomically (a temporary file beside it, fsync, rename): a power
cut leaves the old file or the new one, never half of one. A release that has no entry, or whose
kernel or initrd is gone, is refused with exit 2, naming the ones there are. A grub.cfg longhaul did
not write (update-grub's, on a machine of the facility's own) is refused with exit 1: its
default belongs to /etc/default/grub. Exit 0 done, 1 no grub.cfg of longhaul's to act on.

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

CONF = Path("boot/grub/grub.cfg")
MARK = "# longhaul-boot-kernel: written by longhaul's image build; `longhaul-boot-kernel RELEASE` sets the default"
HEADER = ("set timeout=1", "serial --unit=0 --speed=115200", "terminal_input serial console",
          "terminal_output serial console")
ROOT_LABEL = "longhaul-root"
# GRUB reads a `default` that starts with a digit as an entry's number ("6.1.0-50-amd64" is entry
# 6, which does not exist, so the first boots): entry ids are the release behind this prefix
ID_PREFIX = "kernel-"
_DEFAULT = re.compile(r'^set\s+default=("?)(?P<value>[^"\s]*)\1\s*$')
_ENTRY = re.compile(r"""^menuentry\s.*--id\s+["']?(?P<id>[^"'\s{]+)""")


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


def grub_cfg(releases: list[str], append: str, default: str | None = None, root_label: str = ROOT_LABEL) -> str:
    """One menuentry per release (newest first), each finding the root file system by its label
    (whatever disk the firmware numbers it), and the default the newest unless told otherwise."""
    if not releases:
        raise ValueError("no kernel to boot")
    ordered = sorted(releases, key=release_key, reverse=True)
    default = default or ordered[0]
    if default not in ordered:
        raise ValueError(f"default {default!r} is not one of {ordered}")
    lines = [MARK, f'set default="{ID_PREFIX}{default}"', *HEADER]
    for release in ordered:
        lines += [f'menuentry "Debian {release}" --id "{ID_PREFIX}{release}" {{',
                  f"\tsearch --no-floppy --set=root --label {root_label}",
                  f"\tlinux /boot/vmlinuz-{release} {append}",
                  f"\tinitrd /boot/initrd.img-{release}", "}"]
    return "\n".join(lines) + "\n"


def parse(text: str) -> tuple[list[Entry], str | None]:
    """The menuentries (their ids, kernel and initrd paths) and the default of a grub.cfg."""
    entries: list[dict] = []
    default = None
    for line in text.splitlines():
        stripped = line.strip()
        found = _DEFAULT.match(stripped)
        if found and not entries:
            default = found["value"].removeprefix(ID_PREFIX)
        elif (entry := _ENTRY.match(stripped)) is not None:
            entries.append({"label": entry["id"].removeprefix(ID_PREFIX), "linux": "", "initrd": ""})
        elif entries and stripped.split()[:1] in (["linux"], ["initrd"]) and len(stripped.split()) > 1:
            entries[-1]["linux" if stripped.startswith("linux") else "initrd"] = stripped.split()[1]
    return [Entry(**e) for e in entries], default


def with_default(text: str, label: str) -> str:
    """text with its `set default` line (the one before the first menuentry) naming label;
    everything else is kept as it was."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if _ENTRY.match(line.strip()):
            break
        if _DEFAULT.match(line.strip()):
            lines[i] = f'set default="{ID_PREFIX}{label}"\n'
            return "".join(lines)
    return f'set default="{ID_PREFIX}{label}"\n' + "".join(lines)


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
    if MARK not in text:
        print(f"longhaul-boot-kernel: {conf} was not written by longhaul (update-grub's?): its default is "
              "GRUB_DEFAULT in /etc/default/grub, then update-grub", file=sys.stderr)
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
