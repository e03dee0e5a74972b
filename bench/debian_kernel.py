"""`longhaul run` on Debian's own kernel (issue 42, item 5): one VM booted from the appliance image
(build/image, `make image`), and inside it the main job's embedded lab of namespaces, so that the
lab's preflight chooses for a stock Debian 12 kernel, which has netem and H-TCP and Scalable TCP as
modules (this machine's kernel has neither: it delays by the userspace delay line and runs H-TCP and
Scalable as BPF stand-ins). The image has longhaul at /opt/longhaul; the VM runs under TCG here, so
the quickstart's 500 Mb/s is scaled to what one emulated core carries (QUICKSTART_TCG), and two cells
run the kernel's own H-TCP and Scalable. Prints what preflight chose and what each trial measured,
and writes them as JSON.

    .venv/bin/python bench/debian_kernel.py --out bench/debian-kernel.json      (as root; ~15 min)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from longhaul.core.paths import REPO
from longhaul.hardware.backends.qemu import fleet as qf
from longhaul.hardware.backends.qemu import plan as qp
from longhaul.hardware.executors.process import Completed, Executor, ProcessTable
from longhaul.hardware.executors.ssh import SshExecutor
from longhaul.hardware.tuning import KERNEL_CCA_MODULES
from longhaul.hardware.verdicts import KERNEL_SH

IMAGE = REPO / "build" / "image"

# quickstart.toml's cells at 1/25 of its rate (one TCG core moves ~20 Mb/s through two namespaces'
# tbf and netem), its 128 ms, its queue as the same fraction of the BDP (0.75), half its durations;
# and the foreground alone under the kernel's H-TCP and Scalable TCP
QUICKSTART_TCG = """
[profile]
description = "quickstart at 20 Mb/s under TCG: CUBIC alone, vs CUBIC, vs BBR; H-TCP and Scalable alone"
repeats = 1
[topology]
pairs = 2
access_rate_mbps = 1000
bottleneck_rate_mbps = 20
rtt_ms = 128
queue = "240KB"
mtu = 1500
[tuning]
cca = "cubic"
buffer = "large"
[probe]
pair = 1
mode = "burst"
[[flows]]
name = "fg"
role = "foreground"
tool = "iperf3"
pair = 1
cca = "cubic"
duration_s = 20
[[flows]]
name = "bg"
role = "background"
tool = "iperf3"
pair = 2
start_s = 5
duration_s = 15
[[scenarios]]
name = "alone"
flows = ["fg"]
[[scenarios]]
name = "vs-cubic"
set = { "flows.bg.cca" = "cubic" }
[[scenarios]]
name = "vs-bbr"
set = { "flows.bg.cca" = "bbr" }
[[scenarios]]
name = "htcp-alone"
flows = ["fg"]
set = { "flows.fg.cca" = "htcp" }
[[scenarios]]
name = "scalable-alone"
flows = ["fg"]
set = { "flows.fg.cca" = "scalable" }
"""

CONFIG = """
[lab]
backend = "netns"
[store]
dir = "runs"
[run]
profiles = ["quickstart-tcg"]
[report]
formats = ["html"]
[verify]
# one emulated core: the rate probe's bursts are read over 6 s and allowed 10 %
rate_tolerance_pct = 10
rate_probe_s = 6
"""

# what is read back from the VM: preflight's choices, then the run's own record of each trial
READ_BACK = r"""
import glob, json
run = sorted(glob.glob('/root/dk/runs/*/manifest.json'))[-1]
m = json.load(open(run))
s = json.load(open(run.replace('manifest.json', 'summary.json')))
f = m['features']
cells = []
for c in s['cells']:
    lab = c.get('lab') or {}
    for t in c['trials']:
        fg = next((x for x in t.get('flows') or [] if x['name'] == 'fg'), {})
        cells.append({'cell': c['id'], 'scenario': c.get('scenario'), 'status': t['status'],
                      'fg_cca': fg.get('cca'), 'fg_observed_cca': fg.get('observed_cca'), 'fg_mbps': fg.get('mean_mbps'),
                      'idle_rtt_ms': (t.get('rtt') or {}).get('idle_ms'), 'lab_ok': lab.get('ok'),
                      'rate_measured_mbps': (lab.get('rate_mbps') or {}).get('measured'),
                      'rtt_measured_ms': (lab.get('rtt_ms') or {}).get('measured')})
print(json.dumps({'run': run, 'status': s['status'], 'kernel': m['host'].get('kernel'), 'delay': f.get('delay'),
                  'congestion_controls': f.get('congestion_controls'), 'modules_loaded': f.get('modules_loaded'),
                  'loadable_ccas': f.get('loadable_ccas'), 'bpf_ccas': list(f.get('bpf_ccas') or ()),
                  'cells': cells, 'summary_cells': s['cells']}))
"""


def _write(vm: Executor, path: str, text: str) -> None:
    vm.run(["mkdir", "-p", os.path.dirname(path)])
    vm.run(["tee", path], input=text)


def _in_dk(vm: Executor, argv: list[str], timeout: float) -> Completed:
    """A longhaul command in /root/dk on the VM, as an operator's shell runs it."""
    return vm.run(["env", "COLUMNS=200", "sh", "-c", 'cd /root/dk && exec "$@"', "sh", *argv], timeout=timeout, check=False)


def measure(workdir: Path, memory_mb: int = 2048) -> dict:
    shown = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True).stdout
    plan = qp.fleet_plan("lhdk", qp.free_index(os.getpid(), shown), 1, ns="lh-lhdk")
    plan = replace(plan, vms=(plan.vm("R1"),))
    fleet = qf.VmFleet(plan, IMAGE, workdir / "fleet", ProcessTable(), memory_mb=memory_mb, boot_timeout_s=900)
    t0 = time.monotonic()
    try:
        fleet.boot()
        booted = time.monotonic() - t0
        # a fleet of one VM has no dumbbell for an inventory to describe: its SSH is set up here
        vm = SshExecutor("R1", ProcessTable(), host=plan.vm("R1").mgmt, user="root",
                         key=fleet.workdir / "controller_ed25519", known_hosts=fleet.workdir / "known_hosts")
        _write(vm, "/root/dk/profiles/quickstart-tcg.toml", QUICKSTART_TCG)
        _write(vm, "/root/dk/config.toml", CONFIG)
        # the kernel probe's own output there, kept as test data for tuning.loadable_ccas
        probe = vm.run(["sh", "-c", KERNEL_SH, "sh", "tcp", "TCP_CONG", *KERNEL_CCA_MODULES], timeout=120)
        check = _in_dk(vm, ["longhaul", "check", "--config", "config.toml"], 600)
        print(check.stdout[-4000:], check.stderr[-2000:], file=sys.stderr)
        run = _in_dk(vm, ["longhaul", "run", "--config", "config.toml"], 3600)
        print(run.stdout[-6000:], run.stderr[-6000:], file=sys.stderr)
        back = vm.run(["/opt/longhaul/.venv/bin/python", "-c", READ_BACK], timeout=120)
        result = json.loads(back.stdout)
        result.update(kernel_probe_tcp=probe.stdout, check_rc=check.returncode, run_rc=run.returncode,
                      boot_s=round(booted, 1), vm_kernel=fleet.firstboot["R1"]["kernel"], memory_mb=memory_mb,
                      accel=fleet.accel, image=fleet.image_manifest.get("revision"), check_output=check.stdout[-3000:])
        return result
    finally:
        failures = fleet.close()
        if failures:
            print("teardown:", failures, file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the result as JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lh-dk-") as tmp:
        result = measure(Path(tmp))
    summary = {k: v for k, v in result.items() if k not in ("summary_cells", "check_output", "kernel_probe_tcp")}
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if result["run_rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
