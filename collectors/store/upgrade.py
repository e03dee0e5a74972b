"""Reading stores written by older longhaul versions: each format change registers one step that
lifts a document from version N to N + 1, and the reader applies the steps in memory, in order.

The user's files are never rewritten by reading them: a stored run is evidence, and a report built
from it must not change it. (Resuming a run is the one place an older store is written back, in
the current version, because the resumed run appends to it.)

Version 1 is current, so no step is registered yet. A step is a pure function of the document,
registered by longhaul's one convention for versioned documents (core/documents.py):

    def _run_1_to_2(doc: dict) -> dict: ...
    register_upgrade(fmt.RUN_DOC, 1, _run_1_to_2)

It receives a deep copy and returns the document in the next version's shape (the `version` key is
set by `upgrade`). Register one for each of RUN_DOC and SUMMARY_DOC whenever CURRENT_VERSION moves, and keep
tests/data/run-v1 loading (tests/collectors/test_store_upgrade.py).
"""

from __future__ import annotations

from pathlib import Path

from longhaul.collectors.store import format as fmt
from longhaul.core.documents import FORMATS, UPGRADES, DocumentVersionError

__all__ = ["UPGRADES", "readable_versions", "upgrade"]


def readable_versions(kind: str) -> list[int]:
    """The versions of `kind` (RUN_FORMAT or SUMMARY_FORMAT) this longhaul reads: the current one
    and every older version from which registered steps reach it."""
    return FORMATS[kind].readable_versions()


def upgrade(doc: dict, kind: str, where: Path) -> dict:
    """`doc` (manifest.json or summary.json, as read) in the current version's shape; raises
    StoreVersionError for another format or a version no step leads from. The input is not
    modified."""
    try:
        return FORMATS[kind].read(doc, where)
    except DocumentVersionError as e:
        raise fmt.StoreVersionError(f"{e}; the report cannot be built from it") from None
