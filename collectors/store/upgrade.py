"""Reading stores written by older longhaul versions: each format change registers one step that
lifts a document from version N to N + 1, and the reader applies the steps in memory, in order.

The user's files are never rewritten by reading them: a stored run is evidence, and a report built
from it must not change it. (Resuming a run is the one place an older store is written back, in
the current version, because the resumed run appends to it.)

Version 1 is current, so no step is registered yet. A step is a pure function of the document:

    def _run_1_to_2(doc: dict) -> dict: ...
    UPGRADES[(RUN_FORMAT, 1)] = _run_1_to_2

It receives a deep copy and returns the document in the next version's shape (the `version` key is
set by `upgrade`). Register one for each of RUN_FORMAT and SUMMARY_FORMAT whenever
CURRENT_VERSION moves, and keep tests/data/run-v1 loading (tests/collectors/test_store_upgrade.py).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

from longhaul.collectors.store import format as fmt

Step = Callable[[dict], dict]

UPGRADES: dict[tuple[str, int], Step] = {}


def readable_versions(kind: str) -> list[int]:
    """The versions of `kind` this longhaul reads: the current one and every older version from
    which registered steps reach it."""
    current = fmt.CURRENT_VERSION
    versions = [current]
    version = current - 1
    while (kind, version) in UPGRADES:
        versions.append(version)
        version -= 1
    return sorted(versions)


def upgrade(doc: dict, kind: str, where: Path) -> dict:
    """`doc` (manifest.json or summary.json, as read) in the current version's shape; raises
    StoreVersionError for another format or a version no step leads from. The input is not
    modified."""
    version = fmt.check_format(doc, kind, where, readable_versions(kind))
    if version == fmt.CURRENT_VERSION:
        return doc
    doc = copy.deepcopy(doc)
    while version < fmt.CURRENT_VERSION:
        doc = UPGRADES[(kind, version)](doc)
        version += 1
        doc["version"] = version
    return doc
