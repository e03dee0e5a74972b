"""The appliance image, booted: `longhaul run` with `[lab] backend = "qemu"` boots S1, R1, R2 and D1
from build/image (`make test` builds it first), configures them from their seeds, then runs the
vm-smoke profile over SSH exactly as on hardware: preflight, tuning and netem shaping on the
router VMs, verification, iperf3 with CUBIC, H-TCP and Scalable TCP, the store and the report,
with `[store] influx` (a real influxd on loopback) and Telegraf on every VM; in the same run, on the
same fleet, the vm-tools profile: one cell of every other tool that runs under TCG. Afterwards
nothing of the fleet is left: no namespace, no qemu, no overlay."""
from __future__ import annotations

import csv
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from influxd import INFLUXD, influx_server
from lab_support import TCG_VERIFY, tcg_verify, write_lab_config
from vm_support import namespaces, run_on_fleet

from longhaul.appliance.image.build import TELEGRAF
from longhaul.collectors.store.influx.backfill import spooled_counts
from longhaul.collectors.store.influx.settings import Credential, InfluxSettings
from longhaul.collectors.store.influx.spool import ShipState, spool_dir
from longhaul.collectors.store.influx.targets import V1Target

REPO = Path(__file__).resolve().parents[2]

IMAGE = REPO / "build" / "image"
pytestmark = [pytest.mark.lab, pytest.mark.vm]


def _image_missing() -> str | None:
    if not (IMAGE / "longhaul.raw").is_file():
        return f"no appliance image in {IMAGE} (make image builds it; make test does it first)"
    return None


@pytest.fixture(scope="module")
def vm_run(tmp_path_factory):
    why = _image_missing()
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)        # CI builds the image through make test: its absence is a failure
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("vmlab")
    profile = (REPO / "profiles" / "vm-smoke.toml").read_text()
    # under TCG every hop is an emulated VM: 2-6 ms of the idle RTT is the emulation (measured
    # 2.3 ms min, 5.3 ms mean unshaped S1 -> D1), so the RTT check allows 8 ms (config-vm.toml too)
    config = write_lab_config(tmp, profile, "vm-smoke", verify=TCG_VERIFY)
    (tmp / "profiles" / "vm-tools.toml").write_text((REPO / "profiles" / "vm-tools.toml").read_text())
    # as config-vm.toml: vm-tools first, so vm-smoke's CUBIC cell shares its lab
    config.write_text(config.read_text().replace('profiles = ["vm-smoke"]', 'profiles = ["vm-tools", "vm-smoke"]')
                      + f'\n[lab]\nbackend = "qemu"\n[lab.qemu]\nimage = "{IMAGE}"\nboot = "network"\n')
    if INFLUXD is None:
        pytest.fail("influxd not installed (make setup installs it)")
    with influx_server(tmp_path_factory.mktemp("influxd")) as server:
        config.write_text(config.read_text().replace(
            '[store]\ndir = "runs"\n',
            # Telegraf every 5 s: at 1 s its CPU, emulated by TCG, cost the router VMs enough that a
            # cell's 10 Mb/s bottleneck measured 9.1 (tolerance 0.5) through six attempts
            f'[store]\ndir = "runs"\ninflux = {{ url = "{server.url}", database = "longhaul", '
            f'telegraf_interval_s = 5 }}\n'))
        before = set(namespaces())
        done = run_on_fleet([sys.executable, "-m", "longhaul.appliance.cli", "run", "--config", str(config)],
                            tmp / "runs", tmp, timeout=1800, env={**os.environ, "COLUMNS": "300"})
        print(done.stderr[-6000:], file=sys.stderr)
        yield done, tmp, before, server




def test_profile_runs_on_vms_booted_from_the_image(vm_run):
    done, tmp, _, _ = vm_run
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = Path(done.stdout.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["backend"] == "qemu"
    feats = manifest["features"]
    assert feats["backend"] == "qemu" and feats["delay"] == "netem"      # Debian's kernel has it
    # one lab for both profiles (same path, queue and offloads): vm-tools' cells and vm-smoke's CUBIC
    # on it as built, then H-TCP and Scalable TCP in turn on the same VMs (Lab.retune)
    (record,) = manifest["host_tuning"]
    assert record["backend"] == "qemu" and record["restored"] is True, record.get("not_restored")
    assert (manifest["phases"]["lab build"]["n"], manifest["phases"]["lab retune"]["n"]) == (1, 2)
    nics = {(h, nic): seen for h in ("S1", "R1", "R2", "D1") for nic, seen in record["hosts"][h]["offloads"].items()}
    assert len(nics) == 6 and all(s["applied"] == {"gro": False, "gso": False, "tso": False}
                                  and s["after"] == s["before"] for s in nics.values()), nics
    for end in ("S1", "D1"):      # each cell's CCA loaded (not at boot) and allowed for the run only
        tuned = record["hosts"][end]
        turns = tuned["sysctl"]["applied_in_turn"]
        assert [t["net.ipv4.tcp_congestion_control"] for t in turns] == ["cubic", "htcp", "scalable"], tuned
        assert all(t["net.ipv4.tcp_congestion_control"] in t["net.ipv4.tcp_allowed_congestion_control"].split()
                   for t in turns), turns
        assert tuned.get("modules_loaded", []) == ["tcp_htcp", "tcp_scalable"], (end, tuned)
        assert tuned["sysctl"]["after"] == tuned["sysctl"]["before"]
        assert "htcp" not in tuned["sysctl"]["after"]["net.ipv4.tcp_allowed_congestion_control"]
    vm_lab = feats["vm_lab"]
    assert vm_lab["kernel"].endswith("-amd64") and vm_lab["accel"] in ("tcg", "kvm")
    assert set(vm_lab["vms"]) == {"S1", "R1", "R2", "D1"}
    assert {v["role"] for v in vm_lab["vms"].values()} == {"sender", "router", "receiver"}
    # this fleet has no disks: it netboots by BIOS and iPXE from `longhaul netboot`'s server on its
    # management network (the OPS fleet below boots its disks by legacy BIOS;
    # tests/system/test_vm_firmware.py a disk by UEFI with Secure Boot)
    assert vm_lab["firmware"] == "bios" and vm_lab["boot"] == "network"
    assert all((v["firmware"], v["secure_boot"]) == ("bios", False) for v in vm_lab["vms"].values()), vm_lab["vms"]
    image_files = {"/vmlinuz", "/initrd.img", "/live/filesystem.squashfs"}
    for host in vm_lab["netboot"]:        # each VM leased its inventory address and fetched its own seed only
        assert host["leased"] and f"{host['address']}/24" in vm_lab["vms"][host["host"]]["addresses"], host
        fetched = set(host["files"])
        assert image_files | {f"/seed/{host['host']}/firstboot.toml", f"/seed/{host['host']}/{host['host']}_ed25519"} <= fetched
        assert not [f for f in fetched if f.startswith("/seed/") and not f.startswith(f"/seed/{host['host']}/")], fetched
        assert host["files"]["/live/filesystem.squashfs"] == (IMAGE / "filesystem.squashfs").stat().st_size
    assert {h["host"] for h in vm_lab["netboot"]} == {"S1", "R1", "R2", "D1"}
    assert all(k.startswith("Linux ") and k.endswith("-amd64") for k in feats["kernels"].values())
    assert all(Path(run_dir / "lab" / "vms" / f"{n}-console.log").is_file() for n in vm_lab["vms"])

    summary = json.loads((run_dir / "summary.json").read_text())
    by_cca = {c["flows"][0]["cca"]: c for c in summary["cells"] if c["profile"] == "vm-smoke"}
    assert sorted(by_cca) == ["cubic", "htcp", "scalable"], summary
    for cca, cell in by_cca.items():
        assert cell["status"] == "complete", (cca, cell.get("error"))
        assert cell["lab"]["ok"], cell["lab"]
        flow = cell["trials"][0]["flows"][0]
        assert cca in (flow["observed_cca"] or []), flow      # the VM's sockets really ran it
        assert 0.6 * 10 <= flow["mean_mbps"] <= 1.05 * 10, (cca, flow["mean_mbps"])  # most of 10 Mb/s
    html = next(run_dir.glob("report*.html")).read_text()
    assert "qemu" in html and vm_lab["kernel"] in html


def test_every_tool_runs_on_the_vms_within_what_the_routers_shape(vm_run):
    """vm-tools: GridFTP, paced UDP, NFS, UDT and DPDK (af_packet, and a virtio PCI NIC bound for
    DPDK) from the image's programs, each cell's per-second figures under the 10 Mb/s the router
    VMs shape to (UDT's are what its receiver released)."""
    done, _, _, _ = vm_run
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = Path(done.stdout.strip().splitlines()[-1])
    cells = {c["scenario"]: c for c in json.loads((run_dir / "summary.json").read_text())["cells"]
             if c["profile"] == "vm-tools"}
    assert sorted(cells) == ["dpdk-af", "dpdk-pci", "gf", "nfs", "pu", "udt"]
    # of 10 Mb/s (paced UDP: 80 % of its 6, as its arrivals go; all of its bytes arrive, below);
    # testpmd's 10 s are of flood, timed from its forwarding line (its start took 12-35 s under
    # TCG), and while it floods the shaper is full (below)
    floor = {"gf": 0.5, "pu": 0.48, "nfs": 0.3, "udt": 0.2, "dpdk-af": 0.5, "dpdk-pci": 0.5}
    for name, cell in cells.items():
        trial = cell["trials"][0]
        assert trial["status"] == "ok", (name, trial.get("error"))
        flow = trial["flows"][0]
        with open(run_dir / "cells" / cell["id"] / "trial-1" / "throughput.csv") as fh:
            rows = [(float(r["t_s"]), float(r["mbps"])) for r in csv.DictReader(fh) if r["stream"] == "all"]
        per_second = [mbps for _, mbps in rows]
        print(name, flow["mean_mbps"], rows)
        assert len(per_second) >= 5, (name, per_second)
        assert flow["mean_mbps"] >= floor[name] * 10, (name, flow)
        if name.startswith("dpdk"):
            # the receiver's meter counts in D1's kernel, which under TCG handles arrivals when its
            # vCPU runs: single intervals read 8.4 then 12.4 Mb/s with the shaper at 10. Over the
            # whole flood (its first and last, partial, intervals left out) the rate is the shaper's
            spans = [t - before for before, t in zip([0.0] + [t for t, _ in rows], [t for t, _ in rows])]
            busy = [i for i, (_, mbps) in enumerate(rows) if mbps >= 1.0][1:-1]
            # 10 s of flood, in the meter's intervals of 1.1-2 s under TCG: its whole busy intervals
            # span 5 s at the least (6.9 s seen; CI once had 2 when its 20 s counted from the launch
            # and the start took 15 of them)
            assert sum(spans[i] for i in busy) >= 5.0, (name, rows)
            flood = sum(rows[i][1] * spans[i] for i in busy) / sum(spans[i] for i in busy)
            assert 8.0 <= flood <= 10 * 1.05, (name, flood, rows)
        elif name != "udt":             # UDT's figures are what its receiver released (docs/tools.md)
            # A TCP second is what the receiver acknowledged. Under TCG a stalled vCPU holds a
            # VM's ACKs back 0.1-0.2 s, and a stalled router refills its tbf's 67 KB bucket, so
            # the acknowledged bytes of one second can exceed what the shaper passes by more than
            # re-timing can place (CI: 10.81 Mb/s once, its neighbours 5.9 and 9.5). Such a second
            # is the trial's to name (collector.seconds_above_ceiling, `longhaul invariants`),
            # never silently stored: at most one a cell, and within 15 %.
            above = [mbps for mbps in per_second if mbps > 10 * 1.05]
            named = (trial.get("collector") or {}).get("seconds_above_ceiling") or 0
            assert len(above) <= min(1, named) and max(per_second) <= 10 * 1.15, (name, per_second, named)
    # the paced sender kept its 6 Mb/s schedule for its 8 s and nothing was lost; a stalled VM spread
    # the arrivals over 9.1 s once (CI: a mean of 5.27 Mb/s over them, 6 001 344 bytes all there).
    # A stall beyond its max_lag makes it give the oldest backlog up, and the flow names those bytes
    # (CI: 248 768 skipped after a 1 s stall, 5 752 576 sent and all received): not a tenth of it
    paced = cells["pu"]["trials"][0]["flows"][0]
    skipped = paced.get("skipped_bytes")
    assert skipped is not None and skipped <= 0.1 * 6e6, paced
    assert paced["bytes"] + skipped >= 0.98 * 6e6 and paced["lost_percent"] <= 1.0, paced
    assert cells["gf"]["trials"][0]["flows"][0]["observed_cca"] == ["cubic"]
    # the PCI cell sent from the DPDK port through DPDK's virtio driver, and its trial (which fails
    # when the port or the huge pages are not given back) is ok
    def testpmd_output(name: str) -> str:
        return (run_dir / "cells" / cells[name]["id"] / "trial-1" / "raw" / f"{name}-b0.out").read_text()

    sent = testpmd_output("dpdk-pci")
    assert "0000:00:10.0" in sent and "net_virtio" in sent and "Bye..." in sent, sent[-2000:]
    af_packet = testpmd_output("dpdk-af")
    assert "Probe PCI driver" not in af_packet and "Bye..." in af_packet       # --no-pci: the kernel's eth1


def test_every_point_of_the_vm_run_reaches_influxdb(vm_run):
    done, _, _, server = vm_run
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = Path(done.stdout.strip().splitlines()[-1])
    state = ShipState(spool_dir(run_dir))
    assert state.complete and state.unshipped_bytes(spool_dir(run_dir)) == 0 and state.rejected == 0
    spooled = spooled_counts(run_dir)
    target = V1Target(InfluxSettings(url=server.url, database="longhaul"), Credential(None, "-"))
    try:
        assert {m: sum(1 for _ in target.rows(m, {"run": run_dir.name})) for m in spooled} == dict(spooled)
    finally:
        target.close()


def test_every_vm_s_telegraf_reaches_influxdb(vm_run):
    if not TELEGRAF.is_file():      # the image carries the Telegraf `make telegraf` built, if any
        pytest.skip(f"no {TELEGRAF}, so the image has no Telegraf (make telegraf builds it where a Go >= 1.25 is)")
    done, _, _, server = vm_run
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = Path(done.stdout.strip().splitlines()[-1])
    target = V1Target(InfluxSettings(url=server.url, database="longhaul"), Credential(None, "-"))
    try:
        for measurement in ("cpu", "net", "nstat"):      # Telegraf on each VM, its file fetched at teardown
            hosts = {row["host"] for row in target.rows(measurement, {"run": run_dir.name})}
            assert hosts == {"S1", "R1", "R2", "D1"}, (measurement, hosts, done.stdout[-3000:])
        assert {row["backend"] for row in target.rows("cpu", {"run": run_dir.name})} == {"qemu"}
    finally:
        target.close()


def test_the_fleet_leaves_nothing_behind(vm_run):
    done, tmp, before, _ = vm_run
    assert set(namespaces()) <= before
    assert not list(tmp.glob("runs/.qemu-*"))
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    assert str(tmp) not in ps and "longhaul-qemu" not in ps


def test_a_fleet_that_does_not_come_up_is_torn_down_with_its_consoles_kept(tmp_path):
    """A boot timeout (here 5 s: no VM is up by then) fails the run with exit 1, names the VMs,
    keeps their serial consoles for the engineer and leaves no namespace, qemu or overlay. (After
    the vm_run fixture's run, which has ended by then: the two never overlap.)"""
    if _image_missing():
        pytest.skip(_image_missing())
    before = set(namespaces())
    profile = (REPO / "profiles" / "vm-smoke.toml").read_text()
    config = write_lab_config(tmp_path, profile, "vm-smoke")
    config.write_text(config.read_text() + f'\n[lab]\nbackend = "qemu"\n[lab.qemu]\nimage = "{IMAGE}"\n'
                      "boot_timeout_s = 5\n")
    failed = subprocess.run([sys.executable, "-m", "longhaul.appliance.cli", "run", "--config", str(config)],
                            capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert failed.returncode == 1, failed.stderr[-2000:]
    assert "VMs not up after 5s (tcg)" in failed.stderr or "VMs not up after 5s (kvm)" in failed.stderr
    kept = list(tmp_path.glob("runs/qemu-*-consoles/*-console.log"))
    assert {p.name for p in kept} == {"S1-console.log", "R1-console.log", "R2-console.log", "D1-console.log"}
    assert set(namespaces()) <= before and not list(tmp_path.glob("runs/.qemu-*"))
    assert str(tmp_path) not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout


OPS_LAB = """
[topology]
pairs = 2
access_rate_mbps = 1000
bottleneck_rate_mbps = 10
rtt_ms = 20
queue = "50KB"
mtu = 1500

[roles]
background_pairs = [1]
foreground_pair = 2
probe_pair = 2

[record]
duration_s = 16
warmup_s = 8

[[active_profile]]
cca = "cubic"
seconds = 3
"""
# Six VMs on two cores: the emulated hops add more to the idle RTT than the smoke fleet's four do.
# CI, 2026-11-28 (host CPU steal 4-25 %): medians 33-46 ms on the 20 ms path through six attempts
# (one of 144 ms in a stall), every one refused at the 15 ms tolerance.
OPS_RTT_TOLERANCE_MS = 30


def test_ops_record_on_the_vm_lab(vm_run, tmp_path):
    """`ops record` goes through the runner like any profile, so it runs on the qemu backend too:
    two classes recorded on a fleet of its own (two pairs), its disks booted by legacy BIOS (the
    smoke fleet netboots; tests/system/test_vm_firmware.py boots by UEFI with Secure Boot), after
    the smoke run (and skipped with it where this host is too slow for a TCG lab now,
    tests/support/vm_support.py); a model trained on the recording. `ops run` is the
    same runner path with a chooser (tests/system/test_ops_record_lab.py runs its fixed and adaptive
    schemes on the namespace lab): a second fleet's boot here cost 6.5 minutes of the suite for no
    path of its own."""
    before = set(namespaces())
    lab = tmp_path / "lab.toml"
    lab.write_text(OPS_LAB)
    config = write_lab_config(tmp_path, (REPO / "profiles" / "vm-smoke.toml").read_text(), "vm-smoke",
                              verify=tcg_verify(OPS_RTT_TOLERANCE_MS))
    # the disk's BIOS path (GRUB's i386-pc core image in the BIOS boot partition)
    config.write_text(config.read_text() + f'\n[lab]\nbackend = "qemu"\n[lab.qemu]\nimage = "{IMAGE}"\nfirmware = "bios"\n')
    out = tmp_path / "ds.csv"
    done = run_on_fleet([sys.executable, "-m", "longhaul.appliance.cli", "ops", "record", "--lab", str(lab),
                         "--out", str(out), "--classes", "none,cubic", "--probing", "passive",
                         "--config", str(config)], tmp_path / "ds-lab", tmp_path, timeout=1800)
    print(done.stderr[-4000:], file=sys.stderr)
    assert done.returncode == 0, done.stderr[-3000:]
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["complete"] and meta["lab"]["backend"] == "qemu" and meta["lab"]["delay"] == "netem"
    manifest = json.loads((Path(meta["run_dir"]) / "manifest.json").read_text())
    vm_lab = manifest["features"]["vm_lab"]
    assert manifest["backend"] == "qemu" and (vm_lab["firmware"], vm_lab["boot"]) == ("bios", "disk")
    # as each booted kernel saw it, and the newest of the image's kernels is the default
    assert all((v["firmware"], v["secure_boot"], v["kernel"]) == ("bios", False, vm_lab["kernel"])
               for v in vm_lab["vms"].values()), vm_lab["vms"]
    rows: dict[str, list[float]] = {}
    for line in out.read_text().splitlines()[1:]:
        cls, _, _, _, rtt = line.split(",")
        rows.setdefault(cls, []).append(float(rtt))
    # a round a second, but TCG stalls stretch some gaps to 2 s (6 rounds in 12 s seen, with the
    # CUBIC background: six VMs on two cores)
    assert sorted(rows) == ["cubic", "none"] and all(len(v) >= 7 for v in rows.values()), rows
    # medians: one round stalled by the emulation (148 ms among 21-22.5 ms rounds) must not decide
    idle, busy = (statistics.median(v) for v in (rows["none"], rows["cubic"]))
    assert 19.7 <= idle <= 20 + OPS_RTT_TOLERANCE_MS, idle     # the 20 ms path (never below it) and the emulated hops
    assert busy >= idle + 5, (idle, busy)            # a CUBIC background fills part of the 40 ms queue
    assert set(namespaces()) <= before

    model = tmp_path / "m.npz"
    trained = subprocess.run([sys.executable, "-m", "longhaul.appliance.cli", "ops", "train", str(out),
                              "--probing", "passive", "--w", "2", "--out", str(model)],
                             capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert trained.returncode == 0 and model.is_file(), trained.stderr[-3000:]
