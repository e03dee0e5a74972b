"""One versioning convention for every JSON document longhaul writes (docs/results-format.md):
each carries `"format": NAME, "version": N`, declared once as a `DocumentFormat` beside its writer,
and its readers import that declaration.

A reader checks the stamp with `read`, which also lifts an older version to the current one in
memory through the steps registered for the format, as the run store does (collectors/store/
upgrade.py holds the run store's steps): a document on disk is evidence, and reading it never
rewrites it. A change that breaks a reader bumps the version and registers a pure step

    def _model_1_to_2(doc: dict) -> dict: ...
    register_upgrade(MODEL, 1, _model_1_to_2)

that receives a deep copy and returns the next version's shape (`version` is set by `read`).

Documents written before this convention spelt their stamp differently ("longhaul-plan/1", a bare
`"format": 1`, none at all); a format lists those spellings as `legacy` stamps (the `format` value,
None for none), each read as a version, so files users already keep still load.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

Step = Callable[[dict], dict]

FORMATS: dict[str, DocumentFormat] = {}       # every declared format, by name
UPGRADES: dict[tuple[str, int], Step] = {}     # (format name, version) -> step to version + 1


class DocumentVersionError(ValueError):
    """A document is not of the expected format, or of a version this longhaul cannot read: `key`
    is the stamp's key at fault ("format" or "version"), `reason` the message without the place."""

    def __init__(self, where: Path | str, key: str, reason: str):
        super().__init__(f"{where}: {reason}")
        self.key, self.reason = key, reason


@dataclass(eq=False)        # one object per format: identity is equality
class DocumentFormat:
    name: str                      # e.g. "longhaul-ops-model"
    version: int                   # what this longhaul writes
    what: str = ""                 # a reader-facing name for messages ("an OPS model")
    # older spellings of the stamp, as the document's `format` value -> the version it stands for
    legacy: Mapping[object, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name in FORMATS:
            raise ValueError(f"document format {self.name!r} is declared twice")
        FORMATS[self.name] = self

    def stamp(self) -> dict:
        """The `format` and `version` keys a writer starts its document with."""
        return {"format": self.name, "version": self.version}

    def readable_versions(self) -> list[int]:
        """The current version and every older one from which registered steps reach it."""
        versions = [self.version]
        while (self.name, versions[-1] - 1) in UPGRADES:
            versions.append(versions[-1] - 1)
        return sorted(versions)

    def check(self, doc: object, where: Path | str) -> int:
        """The document's version; DocumentVersionError unless it is this format in a readable
        version."""
        label = self.what or self.name
        if not isinstance(doc, dict):
            raise DocumentVersionError(where, "format", f"not {label} (a JSON object with \"format\": {self.name!r})")
        name, version = doc.get("format"), doc.get("version")
        if (name is None or isinstance(name, (str, int))) and not isinstance(name, bool) and name in self.legacy:
            name, version = self.name, self.legacy[name]
        if name != self.name:
            raise DocumentVersionError(where, "format", f"format is {name!r}, expected {self.name!r}; this is not {label}")
        readable = self.readable_versions()
        if isinstance(version, bool) or version not in readable:
            raise DocumentVersionError(
                where, "version", f"{self.name} version {version!r} is not supported (this longhaul reads "
                f"version {', '.join(map(str, readable))}); use a longhaul release that knows this version")
        return version

    def read(self, doc: object, where: Path | str) -> dict:
        """`doc` in the current version's shape (checked, lifted in memory); the input is not
        modified."""
        version = self.check(doc, where)
        assert isinstance(doc, dict)
        if version == self.version and doc.get("format") == self.name:
            return doc
        doc = copy.deepcopy(doc)
        doc["format"] = self.name
        while version < self.version:
            doc = UPGRADES[(self.name, version)](doc)
            version += 1
        doc["version"] = version
        return doc


def register_upgrade(fmt: DocumentFormat, from_version: int, step: Step) -> None:
    """Register the step that lifts `fmt` documents from `from_version` to the next."""
    if from_version >= fmt.version:
        raise ValueError(f"{fmt.name}: a step from version {from_version} does not lead to {fmt.version}")
    UPGRADES[(fmt.name, from_version)] = step
