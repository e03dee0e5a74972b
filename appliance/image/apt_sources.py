"""Where the image's packages come from: this machine's own apt sources, so an image builds through
the facility's mirror or proxy as the machine's own `apt-get` does (a lab network often has no
route to the public archive), and longhaul names no archive host of its own.

Both forms apt reads are understood: one-line entries (sources.list, *.list) and deb822 stanzas
(*.sources, with `Enabled: no` honoured). The image needs its suite, the suite's updates and its
security suite (the newer of the image's two kernels is there), `main` of each; entries for other
suites, components or archives (a vendor's SDK, backports) are left out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

APT_DIR = Path("/etc/apt")


@dataclass(frozen=True)
class Source:
    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]
    where: str                      # file:line, for messages


def _one_line(path: Path) -> list[Source]:
    found = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        words = line.split("#", 1)[0].split()
        if len(words) < 3 or words[0] != "deb":
            continue
        if words[1].startswith("["):              # options: [arch=amd64 signed-by=...]
            while words and not words[1].endswith("]"):
                words.pop(1)
            words.pop(1)
        if len(words) >= 3:
            found.append(Source(words[1], (words[2],), tuple(words[3:]), f"{path}:{number}"))
    return found


def _deb822(path: Path) -> list[Source]:
    found = []
    for number, stanza in enumerate(path.read_text(errors="replace").split("\n\n"), start=1):
        fields: dict[str, str] = {}
        key = None
        for line in stanza.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line[0] in " \t" and key:
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                fields[key] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
            continue
        for uri in fields.get("uris", "").split():
            found.append(Source(uri, tuple(fields.get("suites", "").split()), tuple(fields.get("components", "").split()),
                                f"{path} stanza {number}"))
    return found


def read_sources(apt_dir: Path = APT_DIR) -> list[Source]:
    found: list[Source] = []
    main = apt_dir / "sources.list"
    if main.is_file():
        found += _one_line(main)
    parts = apt_dir / "sources.list.d"
    for path in sorted(parts.iterdir()) if parts.is_dir() else []:
        if path.suffix == ".list":
            found += _one_line(path)
        elif path.suffix == ".sources":
            found += _deb822(path)
    return found


def image_mirrors(suite: str, sources: list[Source]) -> list[str]:
    """mmdebstrap's MIRROR arguments: one `deb URI SUITE main` line per suite the image needs, from
    the machine's own entries. ValueError naming what is missing."""
    wanted = (suite, f"{suite}-updates", f"{suite}-security")
    lines = []
    for name in wanted:
        lines += [f"deb {s.uri} {name} main" for s in sources if name in s.suites and "main" in s.components]
    missing = [name for name in (suite, f"{suite}-security") if not any(f" {name} " in line for line in lines)]
    if missing:
        raise ValueError(f"this machine's apt sources ({APT_DIR}/sources.list, {APT_DIR}/sources.list.d) have no "
                         f"`main` entry for {' or '.join(missing)}: the image is built from the machine's own archive "
                         "or mirror; add one (e.g. the facility's Debian mirror) and run apt-get update")
    return list(dict.fromkeys(lines))
