"""What a green CI proves: a lab or VM test that skips under CI=true fails the run, unless it is
marked `hardware` (hardware that cannot exist on this machine: a TRex box, a 10G NIC) or is an
opt-in test (`opt_in(VAR, why)`: too long for CI's budget, run when VAR=1 asks), and each
pytest pass writes what it counted so that `.ci/run` ends with one summary of both passes:
passed, failed, every skip by its reason, the absent hardware by name, and each VM test that
ran and passed by name.

    python tests/support/ci_summary.py RESULTS_DIR      (what .ci/run prints last)
"""
from __future__ import annotations

import json
import os
import sys
from collections import Counter, defaultdict
from pathlib import Path

RESULTS_ENV = "LONGHAUL_TEST_RESULTS"     # the folder each pass writes its counts into
ABSENT = "hardware"                        # the marker of a test whose hardware cannot be here
VM = "vm"                                  # the marker of a test that boots VMs: named when it passed
HIDDEN = ("under CI a lab or VM test may skip only for absent hardware (a test marked `hardware`) or "
          "as an opt-in test (opt_in); this one skipped, so what it proves did not run: ")
OPT_IN = "opt-in, not asked for: "           # the reason's prefix, written by opt_in alone


def opt_in(variable: str, why: str):
    """A skip mark for a test that runs only when `variable`=1; CI lists it by name, not as hidden."""
    import pytest  # here: .ci/run's summary runs this file under the system python3, without pytest

    return pytest.mark.skipif(os.environ.get(variable) != "1", reason=f"{OPT_IN}{variable}=1 runs it ({why})")


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def hides_a_lab_test(report) -> bool:
    """A skipped lab test (not an expected failure) under CI, whose hardware could be here."""
    return (in_ci() and report.skipped and not hasattr(report, "wasxfail")
            and "lab" in report.keywords and ABSENT not in report.keywords
            and not skip_reason(report).startswith(OPT_IN))


def fail_hidden_skip(report) -> None:
    """Make such a skip the failure it is (called from conftest's makereport hook)."""
    if hides_a_lab_test(report):
        reason = skip_reason(report)
        report.outcome = "failed"
        report.longrepr = HIDDEN + reason


def write_pass(stats: dict, folder: Path, name: str) -> None:
    """One pass's counts, from pytest's terminal reporter stats."""
    skips = [{"test": r.nodeid, "reason": skip_reason(r), "hardware": ABSENT in r.keywords}
             for r in stats.get("skipped", []) if hasattr(r, "nodeid")]
    ids = lambda *keys: {r.nodeid for k in keys for r in stats.get(k, []) if hasattr(r, "nodeid")}
    counts = {"passed": len(ids("passed")), "failed": len(ids("failed", "error")),
              "skipped": len(skips), "xfailed": len(stats.get("xfailed", []))}
    vms = sorted(r.nodeid for r in stats.get("passed", []) if hasattr(r, "nodeid") and VM in r.keywords
                 and getattr(r, "when", "call") == "call")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps({"pass": name, **counts, "skips": skips, "vm_passed": vms},
                                                    indent=1))


def summary(folder: Path) -> list[str]:
    passes = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []
    total: Counter = Counter()
    lines = []
    by_reason: dict[str, list[str]] = defaultdict(list)
    hardware, asked, vms = [], [], []
    for one in passes:
        total.update({k: one[k] for k in ("passed", "failed", "skipped")})
        vms += one.get("vm_passed", [])
        lines.append(f"  pass {one['pass']}: {one['passed']} passed, {one['failed']} failed, {one['skipped']} skipped")
        for skip in one["skips"]:
            if skip["hardware"]:
                hardware.append(skip["test"])
            elif skip["reason"].startswith(OPT_IN):
                asked.append(f"{skip['test']}: {skip['reason'].removeprefix(OPT_IN)}")
            else:
                by_reason[skip["reason"]].append(skip["test"])
    if not passes:
        lines.append("  no pytest pass wrote its counts (set-up or lint failed before the tests)")
    if by_reason:
        lines.append("  skipped, by reason:")
        for reason, tests in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"    {len(tests):3d}  {reason[:160]}")
            lines.extend(f"           {t}" for t in tests[:5])
            if len(tests) > 5:
                lines.append(f"           ... and {len(tests) - 5} more")
    # a green CI shows its VM tests ran: each one that passed, by name
    lines.append(f"  VM tests that ran and passed: {len(vms)}")
    lines.extend(f"           {t}" for t in vms)
    if hardware:
        lines.append("  skipped for hardware that cannot be here (marked `hardware`):")
        lines.extend(f"           {t}" for t in hardware)
    if asked:
        lines.append("  opt-in tests not asked for this time:")
        lines.extend(f"           {t}" for t in asked)
    return ["CI summary", *lines,
            f"summary: {total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped"]


if __name__ == "__main__":
    print("\n".join(summary(Path(sys.argv[1]))))
