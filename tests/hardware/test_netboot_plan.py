"""hardware/netboot/plan.py: who is booted, with what seed, by which dnsmasq argv (pure), and the
HTTP server's table (a real server on loopback: no root)."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from longhaul.hardware.backends.qemu import plan as qp
from longhaul.hardware.backends.ssh.inventory import load_inventory
from longhaul.hardware.executors.process import wait_until
from longhaul.hardware.image_files import SQUASHFS
from longhaul.hardware.netboot import plan
from longhaul.hardware.netboot.seed import seed_toml
from longhaul.hardware.netboot.server import leases, summary

SERVED = plan.Served("lq7c", "10.213.7.1", "10.213.7.0/24", 8067)


@pytest.fixture
def inventory(tmp_path):
    fleet = qp.fleet_plan("lq7", 7, 2)
    path = tmp_path / "inventory.toml"
    path.write_text(qp.inventory_toml(fleet, tmp_path / "key", tmp_path / "known_hosts"))
    return fleet, load_inventory(path)


def test_every_host_is_booted_by_its_mac_with_its_inventory_wiring(inventory):
    fleet, inv = inventory
    hosts = plan.netboot_hosts(inv, SERVED, "ssh-ed25519 AAAA controller")
    assert [h.name for h in hosts] == [v.name for v in fleet.vms]
    s1 = next(h for h in hosts if h.name == "S1")
    vm = fleet.vm("S1")
    assert (s1.mac, s1.address, s1.mac_hyphens) == (vm.nics[0].mac, vm.mgmt, vm.nics[0].mac.replace(":", "-"))
    seed = s1.seed
    assert seed["interfaces"][0] == {"mac": vm.nics[0].mac, "address": f"{vm.mgmt}/24"}
    assert seed["interfaces"][1] == {"mac": vm.nics[1].mac, "name": "eth1", "address": "10.221.1.2/24"}
    assert seed["interfaces"][2] == {"mac": vm.nics[2].mac, "name": "dpdk0"}        # a DPDK port stays bare
    assert seed["authorized_keys"] == ["ssh-ed25519 AAAA controller"] and seed["host_key"] == "S1_ed25519"
    # the routes the disk-booted fleet's seeds carry, derived from the inventory's pairs and routers
    routes = {h.name: h.seed["routes"] for h in hosts}
    assert routes["S1"] == [{"to": "10.222.1.0/24", "via": "10.221.1.1"}, {"to": "10.222.2.0/24", "via": "10.221.1.1"}]
    assert routes["D2"] == [{"to": "10.221.1.0/24", "via": "10.222.2.1"}, {"to": "10.221.2.0/24", "via": "10.222.2.1"}]
    assert routes["R1"] == [{"to": "10.222.1.0/24", "via": "10.220.0.2"}, {"to": "10.222.2.0/24", "via": "10.220.0.2"}]
    assert routes["R2"] == [{"to": "10.221.1.0/24", "via": "10.220.0.1"}, {"to": "10.221.2.0/24", "via": "10.220.0.1"}]
    # the seed as firstboot reads it
    assert tomllib.loads(seed_toml(seed))["interfaces"][2] == {"mac": vm.nics[2].mac, "name": "dpdk0"}


def test_a_host_off_the_served_network_or_named_by_dns_is_refused(inventory, tmp_path):
    _, inv = inventory
    other = plan.Served("x0", "192.0.2.1", "192.0.2.0/24")
    with pytest.raises(plan.NetbootError, match="is not on x0's network 192.0.2.0/24"):
        plan.netboot_hosts(inv, other, "k")
    # in proxy mode a facility's DHCP gives the address: no network to be on, and no address in the seed
    proxy = plan.netboot_hosts(inv, plan.Served("x0", "192.0.2.1", "192.0.2.0/24", proxy=True), "k")
    assert all("address" not in h.seed["interfaces"][0] for h in proxy)
    named = inv.model_copy(update={"hosts": [inv.hosts[0].model_copy(update={"management": "s1.lab.example"})]})
    with pytest.raises(plan.NetbootError, match="management is an address"):
        plan.netboot_hosts(named, SERVED, "k")
    bare = inv.model_copy(update={"hosts": [h.model_copy(update={"mac": None}) for h in inv.hosts]})
    with pytest.raises(plan.NetbootError, match="no host of the inventory has a mac"):
        plan.netboot_hosts(bare, SERVED, "k")


def test_dnsmasq_answers_one_interface_and_known_macs_only(inventory):
    _, inv = inventory
    hosts = plan.netboot_hosts(inv, SERVED, "k")
    argv = plan.dnsmasq_argv(SERVED, hosts, "/srv/tftp")
    assert argv[0] == "dnsmasq" and "--conf-file=/dev/null" in argv and "--port=0" in argv
    assert "--interface=lq7c" in argv and "--bind-interfaces" in argv and "--dhcp-ignore=tag:!known" in argv
    assert "--dhcp-range=10.213.7.0,static,255.255.255.0,1h" in argv          # no pool: leases by MAC only
    s1 = hosts[0]
    assert f"--dhcp-host={s1.mac},{s1.address},{s1.name}" in argv
    assert "--dhcp-boot=tag:ipxe,http://10.213.7.1:8067/boot.ipxe" in argv
    assert "--dhcp-option=option:router" in argv                             # no default route via the controller
    proxy = plan.dnsmasq_argv(plan.Served("lq7c", "10.213.7.1", "10.213.7.0/24", proxy=True), hosts, "/srv/tftp")
    assert "--dhcp-range=10.213.7.0,proxy,255.255.255.0" in proxy
    assert f"--dhcp-host={s1.mac},set:known" in proxy and not any(a.startswith("--dhcp-boot") for a in proxy)


def test_each_host_s_script_boots_the_shared_root_with_its_seed(inventory):
    _, inv = inventory
    host = plan.netboot_hosts(inv, SERVED, "k")[0]
    script = plan.host_script(host, SERVED)
    kernel = next(line for line in script.splitlines() if line.startswith("kernel "))
    assert kernel.startswith("kernel http://10.213.7.1:8067/vmlinuz initrd=initrd.img boot=live ")
    assert f"fetch=http://10.213.7.1:8067/live/{SQUASHFS}" in kernel
    assert f"BOOTIF=01-{host.mac_hyphens}" in kernel and f"longhaul.seed=http://10.213.7.1:8067/seed/{host.name}/" in kernel
    assert "initrd http://10.213.7.1:8067/initrd.img" in script.splitlines()
    assert "${netX/mac:hexhyp}" in plan.boot_script(SERVED)


def test_what_was_served_is_read_back_per_host(inventory):
    _, inv = inventory
    hosts = plan.netboot_hosts(inv, SERVED, "k")
    s1 = hosts[0]
    log = (f"dnsmasq-dhcp[31025]: 1990283362 DHCPOFFER(lq7c) {s1.address} {s1.mac}\n"
           f"dnsmasq-dhcp[31025]: 1990283362 DHCPACK(lq7c) {s1.address} {s1.mac} s1\n")
    got = leases(log, hosts)
    assert [(x.host, x.address) for x in got] == [("S1", s1.address)]
    requests = [{"t": 1.0, "client": s1.address, "path": "/vmlinuz", "status": 200, "bytes": 10},
                {"t": 2.0, "client": s1.address, "path": "/seed/S2/firstboot.toml", "status": 403, "bytes": 0}]
    rows = {r.host: r for r in summary(hosts, requests, got)}
    assert rows["S1"].leased and rows["S1"].files == {"/vmlinuz": 10} and rows["S1"].first == 1.0
    assert not rows["S2"].leased and rows["S2"].files == {}
    assert rows["S1"].as_dict()["files"] == {"/vmlinuz": 10}         # what the manifest stores


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def test_the_http_server_serves_its_table_only_and_seeds_to_their_owner(tmp_path):
    port = _free_port()
    kernel = tmp_path / "vmlinuz"
    kernel.write_bytes(b"k" * 100_000)
    site = {"bind": "127.0.0.1", "port": port, "log": str(tmp_path / "http.jsonl"),
            "files": {"/vmlinuz": str(kernel), "/seed/S1/S1_ed25519": str(tmp_path / "absent")},
            "texts": {"/boot.ipxe": "#!ipxe\n", "/seed/S1/firstboot.toml": "name = 'S1'\n",
                      "/seed/S2/firstboot.toml": "name = 'S2'\n"},
            "owners": {"/seed/S1/firstboot.toml": "127.0.0.1", "/seed/S2/firstboot.toml": "10.0.0.2"}}
    (tmp_path / "site.json").write_text(json.dumps(site))
    proc = subprocess.Popen([sys.executable, "-m", "longhaul.hardware.netboot.http", str(tmp_path / "site.json")])
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: (tmp_path / "http.jsonl").exists(), timeout=20, what="the server's first log line")
        wait_until(lambda: _get(base + "/boot.ipxe")[0] == 200, timeout=20, what="the server")
        assert _get(base + "/vmlinuz") == (200, b"k" * 100_000)
        assert _get(base + "/seed/S1/firstboot.toml") == (200, b"name = 'S1'\n")
        assert _get(base + "/seed/S2/firstboot.toml")[0] == 403           # another host's
        for path in ("/", "/../../etc/passwd", "/vmlinuz/..", "/seed/", "/seed/S1/S1_ed25519"):
            assert _get(base + path)[0] == 404, path
        logged = [json.loads(line) for line in (tmp_path / "http.jsonl").read_text().splitlines()]
        # one thread per request logs when its answer is sent: the lines' order is not the requests'
        kernel_sent = [e for e in logged if e["path"] == "/vmlinuz"]
        assert len(kernel_sent) == 1
        assert {"client": "127.0.0.1", "status": 200, "bytes": 100_000}.items() <= kernel_sent[0].items()
        assert [e["status"] for e in logged if e["path"].startswith("/seed/S2")] == [403]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_image_recipe_squashes_the_newest_kernel_s_root_only():
    from longhaul.appliance.image.build import squashfs_argv
    argv = squashfs_argv(Path("/t/root"), Path("/o/fs.sqfs"), ["6.1.0-50-amd64", "6.1.0-56-amd64"])
    assert argv[:3] == ["mksquashfs", "/t/root", "/o/fs.sqfs"] and "zstd" in argv
    excluded = argv[argv.index("-e") + 1:]
    assert excluded == ["boot", "usr/lib/modules/6.1.0-50-amd64"]


def test_firstboot_fetches_a_served_seed_and_its_host_key(tmp_path, monkeypatch):
    """The host side of the seed URL: firstboot reads longhaul.seed= and keeps what it fetched."""
    from longhaul.appliance.image import firstboot
    port = _free_port()
    key = tmp_path / "S1_ed25519"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nx\n")
    site = {"bind": "127.0.0.1", "port": port, "log": str(tmp_path / "http.jsonl"),
            "files": {"/seed/S1/S1_ed25519": str(key)},
            "texts": {"/seed/S1/firstboot.toml": seed_toml({"name": "S1", "role": "sender", "host_key": "S1_ed25519"})}}
    (tmp_path / "site.json").write_text(json.dumps(site))
    proc = subprocess.Popen([sys.executable, "-m", "longhaul.hardware.netboot.http", str(tmp_path / "site.json")])
    monkeypatch.setattr(firstboot, "ETC", tmp_path / "etc")
    try:
        wait_until(lambda: (tmp_path / "http.jsonl").exists(), timeout=20, what="the server")
        url = firstboot.seed_url(f"BOOT_IMAGE=vmlinuz boot=live longhaul.seed=http://127.0.0.1:{port}/seed/S1/ quiet")
        assert url == f"http://127.0.0.1:{port}/seed/S1/"
        seed, kept = firstboot.fetch_seed(url)
        assert seed == {"name": "S1", "role": "sender", "host_key": "S1_ed25519"}
        assert kept == tmp_path / "etc" / "seed" and (kept / "S1_ed25519").read_text() == key.read_text()
        assert (kept / "S1_ed25519").stat().st_mode & 0o777 == 0o600
        assert firstboot.seed_url("BOOT_IMAGE=vmlinuz root=LABEL=x") is None
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_proxy_s_answers_are_read_back_and_its_refusals_are_not():
    """dnsmasq's log from tests/system/test_netboot_proxy.py (proxy mode, two inventory hosts and
    one machine it ignored): a host answered is `PXE(...) MAC proxy`, one ignored is
    `... proxy-ignored`, which is no answer even for a MAC the inventory might hold."""
    log = (Path(__file__).parent.parent / "data" / "netboot" / "dnsmasq-proxy.log").read_text()
    hosts = [plan.NetbootHost(name, "sender", mac, address, {}) for name, mac, address in (
        ("S1", "52:54:00:aa:00:11", "10.231.1.11"), ("D1", "52:54:00:aa:00:21", "10.231.1.21"),
        ("X", "52:54:00:aa:00:99", "10.231.1.150"))]
    answered = {lease.host for lease in leases(log, hosts)}
    assert answered == {"S1", "D1"}
    assert "52:54:00:aa:00:99 proxy-ignored" in log
