"""One versioning convention for every document longhaul writes (core/documents.py): declared
once, stamped by its writer, read (and lifted) by its readers; older spellings still load; and no
module writes a `format` stamp by hand."""
from __future__ import annotations

import importlib
import pkgutil
import re
import tomllib
from pathlib import Path

import pytest

import longhaul
from longhaul.core import documents
from longhaul.core.documents import FORMATS, DocumentFormat, DocumentVersionError, register_upgrade
from longhaul.core.paths import REPO

PRODUCT = ("appliance", "hardware", "drivers", "collectors", "reports", "package")


@pytest.fixture
def toy(monkeypatch):
    """A format of its own, forgotten after the test."""
    monkeypatch.setattr(documents, "FORMATS", dict(FORMATS))
    monkeypatch.setattr(documents, "UPGRADES", dict(documents.UPGRADES))
    return DocumentFormat("longhaul-toy", 1, "a toy document", legacy={"longhaul-toy/1": 1, None: 1})


def test_a_document_is_stamped_and_read_back_as_it_is(toy):
    doc = {**toy.stamp(), "x": 1}
    assert doc == {"format": "longhaul-toy", "version": 1, "x": 1}
    assert toy.check(doc, "t.json") == 1 and toy.read(doc, "t.json") is doc


def test_another_format_or_version_is_refused_naming_the_place_and_what_is_readable(toy):
    with pytest.raises(DocumentVersionError, match=r"t.json: format is 'longhaul-run', expected 'longhaul-toy'; "
                                                   r"this is not a toy document") as e:
        toy.check({"format": "longhaul-run", "version": 1}, "t.json")
    assert e.value.key == "format" and isinstance(e.value, ValueError)
    with pytest.raises(DocumentVersionError, match=r"longhaul-toy version 2 is not supported \(this longhaul "
                                                   r"reads version 1\)") as e:
        toy.read({"format": "longhaul-toy", "version": 2}, "t.json")
    assert e.value.key == "version"
    for bad in ([], "x", {"format": "longhaul-toy", "version": True}, {"format": ["longhaul-toy"]}):
        with pytest.raises(DocumentVersionError):
            toy.check(bad, "t.json")


def test_older_spellings_load_as_the_version_they_stand_for(toy):
    for stamp in ({"format": "longhaul-toy/1"}, {}):
        doc = {**stamp, "x": 1}
        assert toy.read(doc, "t.json") == {"format": "longhaul-toy", "version": 1, "x": 1}
        assert doc == {**stamp, "x": 1}                      # read, never rewritten


def test_registered_steps_lift_an_old_version_in_memory(toy, monkeypatch):
    monkeypatch.setattr(toy, "version", 3)
    def x_becomes_y(d: dict) -> dict:
        d["y"] = d.pop("x")
        return d

    register_upgrade(toy, 1, x_becomes_y)
    register_upgrade(toy, 2, lambda d: {**d, "z": d["y"] * 2})
    assert toy.readable_versions() == [1, 2, 3]
    old = {"format": "longhaul-toy", "version": 1, "x": 4}
    assert toy.read(old, "t.json") == {"format": "longhaul-toy", "version": 3, "y": 4, "z": 8}
    assert old == {"format": "longhaul-toy", "version": 1, "x": 4}
    with pytest.raises(ValueError, match="does not lead to"):
        register_upgrade(toy, 3, lambda d: d)


def test_a_format_is_declared_once(toy):
    with pytest.raises(ValueError, match="declared twice"):
        DocumentFormat("longhaul-toy", 2)


def _import_every_module() -> None:
    for mod in pkgutil.walk_packages(longhaul.__path__, "longhaul."):
        if ".templates" not in mod.name and not mod.name.endswith(".__main__"):
            importlib.import_module(mod.name)


def test_every_format_longhaul_writes_is_declared_with_a_distinct_name():
    _import_every_module()
    names = set(FORMATS)
    expected = {"longhaul-run", "longhaul-summary", "longhaul-fingerprint", "longhaul-ops-dataset",
                "longhaul-ops-model", "longhaul-ops-evaluation", "longhaul-ops-plan", "longhaul-ops-fig29",
                "longhaul-plan", "longhaul-plan-replay", "longhaul-replay-leg", "longhaul-profile-analysis",
                "longhaul-image", "longhaul-netboot-state"}
    assert expected <= names, expected - names
    assert all(re.fullmatch(r"longhaul-[a-z0-9-]+", n) and "/" not in n for n in names)


def test_no_module_writes_a_format_stamp_by_hand():
    """A stamp written as a literal `"format": ...` bypasses the declaration (and its version)."""
    by_hand = []
    for top in PRODUCT:
        for path in (REPO / top).rglob("*.py"):
            if path == Path(documents.__file__).resolve():       # the one place that stamps
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(r"""[{,]\s*["']format["']\s*:""", line) and not line.lstrip().startswith("#"):
                    by_hand.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert by_hand == []


def test_the_package_list_names_every_folder_with_modules():
    """pyproject's explicit package list (the product's folders are mapped into one package) must
    not miss a subpackage: an installed, non-editable longhaul would lack it."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed, found = set(project["packages"]), set()
    for prefix, folder in project["package-dir"].items():
        for init in (REPO / folder).rglob("__init__.py"):
            found.add(".".join((prefix, *init.parent.relative_to(REPO / folder).parts)))
    assert found - listed == set(), "add these to [tool.setuptools] packages"
