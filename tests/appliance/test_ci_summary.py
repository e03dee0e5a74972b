"""`.ci/run`'s closing summary (tests/support/ci_summary.py) from the counts each pytest pass
writes: the VM tests that passed are named, an opt-in skip is listed apart from a hidden one."""

from __future__ import annotations

from types import SimpleNamespace

import ci_summary


def _report(nodeid: str, *marks: str, reason: str | None = None):
    return SimpleNamespace(nodeid=nodeid, keywords=dict.fromkeys(marks, 1), when="call",
                           longrepr=(nodeid, 1, f"Skipped: {reason}") if reason else None)


def test_the_summary_names_each_vm_test_that_passed_and_each_skip_by_kind(tmp_path):
    stats = {"passed": [_report("t/test_qemu_lab.py::test_ops", "lab", "vm"), _report("t/test_a.py::test_x")],
             "skipped": [_report("t/test_trex.py::test_live", "lab", "hardware", reason="no TRex"),
                         _report("t/test_vm_fault.py::test_kill", "lab", "vm",
                                 reason=f"{ci_summary.OPT_IN}LONGHAUL_VM_FAULT_TESTS=1 runs it (long)")]}
    ci_summary.write_pass(stats, tmp_path, "lab")
    lines = ci_summary.summary(tmp_path)
    text = "\n".join(lines)
    assert "  VM tests that ran and passed: 1\n           t/test_qemu_lab.py::test_ops" in text
    assert "(marked `hardware`):\n           t/test_trex.py::test_live" in text
    assert "not asked for this time:\n           t/test_vm_fault.py::test_kill: LONGHAUL_VM_FAULT_TESTS=1" in text
    assert lines[-1] == "summary: 2 passed, 0 failed, 2 skipped"
