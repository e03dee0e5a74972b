"""`longhaul check --inventory`: which checks each host gets, what their output means, and a real
run against sshd on a namespace host (tests/support/ssh_lab.py).

Captured outputs (tests/data/readiness/*.json: argv, returncode, stdout, stderr) are the check
scripts of hardware/backends/ssh/readiness.py run on this machine (Debian 12, kernel 6.18 built without module
support, no systemd, no NTP client), by running each Check's argv with subprocess.run; see
_capture.md beside them. The ssh failure texts come from the lab below, where real ssh runs produce
them. Outputs this machine cannot give (chronyc, ntpq, FreeBSD's kldstat and ifconfig, a module
file found by modinfo) are written from the tools' documented formats and say so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace as NS

import pytest
from rich.console import Console
from ssh_lab import lab_skip_reason, ssh_lab

from longhaul.appliance.run.preflight import needs_of
from longhaul.core.errors import ConfigError
from longhaul.drivers import nfs_client
from longhaul.hardware import verdicts
from longhaul.hardware.backends.ssh import check as ci
from longhaul.hardware.backends.ssh import readiness as r
from longhaul.hardware.backends.ssh.host_checks import CONNECT_TIMEOUT_S
from longhaul.hardware.backends.ssh.inventory import load_inventory
from longhaul.hardware.executors.process import Completed, NetnsExecutor, ProcessTable
from longhaul.hardware.routers import freebsd_ipfw as fb
from longhaul.hardware.routers import linux_tc as lt

DATA = Path(__file__).parents[1] / "data" / "readiness"
REPO = Path(__file__).resolve().parents[2]


def captured(name: str) -> Completed:
    d = json.loads((DATA / f"{name}.json").read_text())
    return Completed(d["argv"], d["returncode"], d["stdout"], d["stderr"])


def done(stdout: str = "", returncode: int = 0, stderr: str = "") -> Completed:
    return Completed([], returncode, stdout, stderr)


def host(role="sender", os="linux", interfaces=(), name="H", management="192.0.2.1", ssh_port=22):
    return NS(name=name, role=role, os=os, interfaces=list(interfaces), management=management, ssh_port=ssh_port)


def iface(name="eno1", rate=1000, pci=None, dpdk=False):
    return NS(name=name, rate_mbps=rate, pci=pci, dpdk=dpdk)


# -- which checks ----------------------------------------------------------------------------------

def test_checks_follow_role_and_os_and_never_interpolate_names():
    sender = r.host_checks(host("sender", interfaces=[iface("eno1", pci="0000:3B:00.0")]),
                           r.Wants(tools=("globus-url-copy",), ccas=("bbr",)))
    names = [c.name for c in sender]
    assert names == ["tools", "congestion controls", "clock sync", "clock offset", "link eno1", "pci 0000:3B:00.0"]
    tools = sender[0]
    assert tools.argv[:2] == ("sh", "-c") and tools.argv[3:] == ("sh", "iperf3", "fping", "python3", "ss",
                                                                 "globus-url-copy")
    assert "iperf3" not in tools.argv[2] and "eno1" not in sender[4].argv[2]     # positional args only
    assert sender[1].argv[-1] == "bbr" and sender[1].params == (("bbr",), True, ())
    assert sender[5].argv[-1] == "0000:3b:00.0"                                   # sysfs is lower case
    # a DPDK port may be bound away from the kernel: its PCI device is checked, not a link
    dpdk = r.host_checks(host("sender", interfaces=[iface("eth1"), iface("dpdk0", pci="0000:00:10.0", dpdk=True)]))
    assert [c.name for c in dpdk][-2:] == ["link eth1", "pci 0000:00:10.0"]
    receiver = [c.name for c in r.host_checks(host("receiver"))]
    assert "congestion controls" not in receiver and "tools" in receiver
    linux_router = r.host_checks(host("router", interfaces=[iface("wan")]))
    assert linux_router[0].params == ("ip", "tc") and linux_router[1].name == "qdiscs"
    assert linux_router[1].argv[3:] == ("sh", "sch", "NET_SCH", "tbf", "netem", "htb")
    bsd = r.host_checks(host("router", os="freebsd", interfaces=[iface("em0")]))
    assert bsd[0].params == ("ipfw", "sysctl") and bsd[1].name == "dummynet"
    assert bsd[-1].argv == ("ifconfig", "em0") and bsd[-1].name == "link em0"
    controller = r.host_checks(host("controller"))
    assert all(c.local for c in controller) and [c.name for c in controller] == ["tools", "clock sync"]
    assert r.host_checks(host("sender"))[1].params == (r.DEFAULT_CCAS, False, ())    # no profile: optional


def test_what_the_profiles_need():
    from longhaul.appliance.config.load import load_config
    assert ci.wants(None) == r.Wants()
    wants = ci.wants(needs_of(load_config(REPO / "config.toml", ["cubic-vs-bbr"])))
    assert wants == r.Wants(("iperf3",), ("cubic", "bbr"))
    wants = ci.wants(needs_of(load_config(REPO / "config.toml", ["nfs-shared"])))
    writer = str(nfs_client.helper_path())
    assert {"ganesha.nfsd", writer, "iperf3", "globus-url-copy"} <= set(wants.tools) and wants.ccas == ("cubic",)


def test_a_receiver_must_name_its_test_address_when_gridftp_runs():
    from longhaul.appliance.config.load import load_config
    wants = ci.wants(needs_of(load_config(REPO / "config.toml", ["nfs-shared"])))
    assert wants.resolving == ("gridftp",)
    rx = host("receiver", interfaces=[NS(name="eth1", rate_mbps=1000, pci=None, dpdk=False, link="access", ip="10.1.2.2")])
    (check,) = [c for c in r.host_checks(rx, wants) if c.kind == "name"]
    assert check.argv == ("getent", "hosts", "10.1.2.2")
    assert r.interpret(check, done("10.1.2.2        d1-test\n")) == ("ok", "d1-test")
    status, detail = r.interpret(check, done("", returncode=2))
    assert status == "fail" and "gridftp looks its own test address up" in detail and "/etc/hosts" in detail
    assert not [c for c in r.host_checks(rx, r.Wants()) if c.kind == "name"]


def test_the_scripts_parse_as_posix_sh():
    for script in (r._TOOLS_SH, verdicts.KERNEL_SH, r._CCA_SH, r._CLOCK_SH, lt._LINK_SH, lt._PCI_SH, fb._KLD_SH,
                   r._TREX_SH, r.CLOCK_LOOP_SH):
        subprocess.run(["sh", "-n", "-c", script], check=True)


def test_a_generator_is_checked_for_its_trex_tree_server_and_dpdk_ports():
    gen = host("generator", interfaces=[iface("trex0", 10000, pci="0000:3B:00.0")])
    gen.trex_path = "/opt/trex/v3.04"
    checks = r.host_checks(gen, r.Wants(tools=("iperf3",)))
    assert [c.name for c in checks] == ["tools", "trex", "clock sync", "clock offset", "pci 0000:3B:00.0"]
    assert checks[0].params == r.GENERATOR_TOOLS                 # not the end hosts' iperf3 and fping
    assert checks[1].argv[-1] == "/opt/trex/v3.04" and "/opt/trex" not in checks[1].argv[2]
    assert r.interpret_trex(done("server present\napi present\nrpc listening\n"), ("/t",))[0] == r.OK
    status, detail = r.interpret_trex(done("server present\napi present\nrpc closed\n"), ("/t",))
    assert status == r.FAIL and "t-rex-64 -i" in detail and "4501" in detail
    status, detail = r.interpret_trex(done("server missing\napi present\nrpc closed\n"), ("/t",))
    assert status == r.FAIL and "/t/t-rex-64" in detail
    status, detail = r.interpret_trex(done("server present\napi missing\nrpc listening\n"), ("/t",))
    assert status == r.FAIL and "STL client library" in detail


def test_the_trex_script_reads_a_release_tree(tmp_path):
    (tmp_path / "t-rex-64").write_text("#!/bin/sh\n")
    (tmp_path / "t-rex-64").chmod(0o755)
    (tmp_path / "automation/trex_control_plane/interactive/trex/stl").mkdir(parents=True)
    out = subprocess.run(["sh", "-c", r._TREX_SH, "sh", str(tmp_path)], capture_output=True, text=True).stdout
    assert out.splitlines()[:2] == ["server present", "api present"]
    assert out.splitlines()[2] in ("rpc listening", "rpc closed")


# -- interpretations of captured output -------------------------------------------------------------

def test_tools():
    assert r.interpret_tools(captured("tools_all_present"), ("iperf3", "fping", "python3", "ss")) == \
        ("ok", "iperf3 fping python3 ss")
    status, detail = r.interpret_tools(captured("tools_missing"), ("iperf3", "no-such-tool", "fping", "globus-nope"))
    assert status == "fail" and detail == "missing: no-such-tool globus-nope"


def test_qdiscs_from_the_kernel_config_when_the_kernel_has_no_modules():
    status, detail = lt.read_qdiscs(captured("qdiscs_linux_nomodules"))
    assert status == "warn"                                     # netem missing: optional
    assert "tbf: built in (kernel config)" in detail and "htb: built in" in detail
    assert "netem: not in this kernel (# CONFIG_NET_SCH_NETEM is not set)" in detail and "delay line" in detail
    status, detail = lt.read_qdiscs(captured("qdiscs_unknown"))
    assert status == "warn" and "cannot tell" in detail and "Module sch_tbf not found" in detail
    no_tbf = done("tbf config # CONFIG_NET_SCH_TBF is not set\nnetem loaded\nhtb builtin\n")
    assert lt.read_qdiscs(no_tbf)[0] == "fail"
    # what modinfo prints on a modular kernel (kmod's modinfo -n: the module's path, or "(builtin)")
    modular = done("tbf module /lib/modules/6.1.0-18-amd64/kernel/net/sched/sch_tbf.ko\n"
                   "netem module (builtin)\nhtb loaded\n")
    assert lt.read_qdiscs(modular) == \
        ("ok", "tbf: module /lib/modules/6.1.0-18-amd64/kernel/net/sched/sch_tbf.ko; netem: built in; htb: loaded")
    assert captured("modinfo_sch_netem").stderr == "modinfo: ERROR: Module sch_netem not found.\n"
    assert verdicts.kernel_feature("unknown " + captured("modinfo_sch_netem").stderr.strip())[0] == "unknown"


def test_congestion_controls():
    ccas = captured("ccas_linux_nomodules")         # asked for cubic bbr vegas dctcp
    assert ccas.stdout.splitlines()[0] == "reno bbr cubic"
    status, detail = r.interpret_ccas(ccas, (("cubic", "bbr", "vegas", "dctcp"), True, ()))
    assert status == "fail" and detail.startswith("available: reno bbr cubic")
    assert "vegas: not in this kernel (# CONFIG_TCP_CONG_VEGAS is not set)" in detail
    assert r.interpret_ccas(ccas, (("cubic", "bbr", "vegas"), False, ()))[0] == "warn"   # nobody asked
    assert r.interpret_ccas(ccas, (("cubic", "bbr"), True, ())) == ("ok", "available: reno bbr cubic")
    loadable = done("reno cubic\nbbr module /lib/modules/6.1.0-18-amd64/kernel/net/ipv4/tcp_bbr.ko\n")
    status, detail = r.interpret_ccas(loadable, (("bbr",), True, ()))
    assert status == "warn" and "bbr: not loaded" in detail and "modprobe tcp_bbr" in detail
    unreadable = done("", 1, "cat: /proc/sys/net/ipv4/tcp_available_congestion_control: No such file or directory\n")
    assert r.interpret_ccas(unreadable, (("cubic",), True, ()))[0] == "fail"
    # a cell that allows its BPF version (cca_fallback): the preflight decides, from the stand-ins row
    status, detail = r.interpret_ccas(done("reno cubic\nhtcp config # CONFIG_TCP_CONG_HTCP is not set\n"), (("cubic", "htcp"), True, ("htcp",)))
    assert status == "warn" and "htcp:" in detail and "cca_fallback runs longhaul's lh_htcp" in detail


def test_a_bpf_cca_is_checked_on_both_ends_by_its_holder_not_by_the_kernel_list(tmp_path):
    wants = r.Wants(ccas=("cubic", "lh_frac10"))
    sender, receiver = r.host_checks(host("sender"), wants), r.host_checks(host("receiver"), wants)
    (ccas,) = [c for c in sender if c.kind == "ccas"]
    assert ccas.argv[-1] == "cubic" and ccas.params == (("cubic",), True, ())  # the kernel's list: cubic only
    for checks in (sender, receiver):
        (bpf,) = [c for c in checks if c.kind == "bpf"]
        assert bpf.argv == (sys.executable, "-m", "longhaul.hardware.bpf_hold", "--check", "lh_frac10")
    assert not [c for c in r.host_checks(host("router"), wants) if c.kind == "bpf"]
    assert not [c for c in r.host_checks(host("sender"), r.Wants(ccas=("cubic",))) if c.kind == "bpf"]
    # a cell allowing the BPF version of H-TCP: both ends say whether they could run it, as a warning
    fallback = r.Wants(ccas=("cubic", "htcp"), fallback=("htcp",))
    for role in ("sender", "receiver"):
        (row,) = [c for c in r.host_checks(host(role), fallback) if c.kind == "stand-ins"]
        assert row.name == r.STAND_INS_CHECK and row.argv[-2:] == ("--check", "lh_htcp")
        assert r.interpret(row, done("", 1, "lh_htcp.bpf.o is not built\n"))[0] == "warn"
    assert not [c for c in r.host_checks(host("router"), fallback) if c.kind == "stand-ins"]
    # the holder's own answers, run here: built objects (or not), and a name that is not ours
    def run(*names, env=None):
        res = subprocess.run(list(bpf.argv[:4]) + list(names), capture_output=True, text=True,
                             env={**os.environ, **(env or {})})
        return r.interpret(bpf, Completed(list(bpf.argv), res.returncode, res.stdout, res.stderr))
    assert run("lh_htcp", env={"LONGHAUL_BPF_DIR": str(tmp_path)}) == (
        "fail", f"{tmp_path}/lh_htcp.bpf.o is not built (make setup builds it)")
    status, detail = run("lh_cubic")
    assert status == "fail" and detail.startswith("not longhaul's BPF congestion controls: lh_cubic (known: lh_htcp")
    from longhaul.hardware import bpf_ccas
    if bpf_ccas.unavailable_reason() is None and bpf_ccas.BPF_CCAS["lh_frac10"].object.is_file():
        assert run("lh_frac10") == ("ok", "can register lh_frac10")
    status, detail = r.interpret(bpf, done("", 1, "/usr/bin/python3: Error while finding module specification for "
                                                  "'longhaul.hardware.bpf_hold' (ModuleNotFoundError: No module named 'longhaul')\n"))
    assert status == "fail" and detail.startswith("longhaul is not installed at the controller's path there")


def test_clock_sync():
    status, detail = r.interpret_clock(captured("clock_no_systemd"))
    assert status == "warn" and "no NTP client answers" in detail and "not been booted with systemd" in detail
    assert r.interpret_clock(done("timedatectl yes\n"))[0] == "ok"
    assert r.interpret_clock(done("timedatectl no\n"))[0] == "warn"
    # chronyc tracking's "Leap status" line (chronyc(1)); timedatectl may say no while chrony says yes
    assert r.interpret_clock(done("timedatectl no\nchronyc Leap status     : Normal\n")) == \
        ("ok", "synchronized (chronyc)")
    assert r.interpret_clock(done("chronyc Leap status     : Not synchronised\n"))[0] == "warn"
    assert "506 Cannot talk" in r.interpret_clock(done("chronyc 506 Cannot talk to daemon\n"))[1]
    # ntpq -c rv's first line (ntpq(1), a FreeBSD router's ntpd)
    assert r.interpret_clock(done("ntpq associd=0 status=0615 leap_none, sync_ntp, 1 event, clock_sync,\n"))[0] == "ok"
    assert r.interpret_clock(done("ntpq associd=0 status=c016 leap_alarm, sync_unspec, 1 event, restart,\n"))[0] == "warn"
    assert r.interpret_clock(done(""))[1] == "no NTP client answers (no timedatectl, chronyc or ntpq)"


def test_clock_offset_takes_the_tightest_exchange():
    now = 1795350734.0
    samples = [(now, f"{now + 0.0503:.9f}", now + 0.100),      # round trip 100 ms: loose
               (now + 1, f"{now + 1 + 0.0021:.9f}", now + 1 + 0.002)]
    status, detail = r.clock_offset(samples)
    assert status == "ok" and detail.startswith("+1.1 ms ± 1.0 ms")
    assert r.clock_offset([(now, f"{now + 0.0305:.9f}", now + 0.001)])[0] == "warn"
    assert r.clock_offset([(now, f"{now - 2.5:.9f}", now + 0.001)])[0] == "fail"
    status, detail = r.clock_offset([(now, f"{int(now)}.N", now + 0.001)])       # a date without %N
    assert status == "warn" and "1 s resolution" in detail
    assert r.clock_offset([(now, "date: illegal option", now + 0.001)])[0] == "fail"
    assert r.clock_offset([])[0] == "fail"


def test_links():
    assert lt.read_link(captured("link_eth0"), 1000) == \
        ("warn", "speed unknown (virtual NIC or link down); link up; inventory 1000 Mb/s")   # virtio: -1
    assert lt.read_link(captured("link_absent"), 1000) == ("fail", "no such interface on this host")
    assert lt.read_link(done("up\n1000\n"), 1000) == ("ok", "1000 Mb/s (inventory 1000)")
    assert lt.read_link(done("up\n100\n"), 1000)[0] == "fail"
    assert lt.read_link(done("up\n10000\n"), 1000)[0] == "warn"
    assert lt.read_link(captured("link_veth_down"), 1000) == \
        ("warn", "speed unknown (virtual NIC or link down); link down; inventory 1000 Mb/s")
    # FreeBSD ifconfig(8)'s media and status lines
    bsd = done("em0: flags=8843<UP,BROADCAST,RUNNING,SIMPLEX,MULTICAST> metric 0 mtu 1500\n"
               "\tmedia: Ethernet autoselect (1000baseT <full-duplex>)\n\tstatus: active\n")
    assert fb.read_link(bsd, 1000) == ("ok", "1000 Mb/s (inventory 1000)")
    ten = done("ix1: flags=8843<UP> mtu 9000\n\tmedia: Ethernet autoselect (10Gbase-SR <full-duplex>)\n"
               "\tstatus: active\n")
    assert fb.read_link(ten, 10000)[0] == "ok"
    assert fb.read_link(done("", 1, "ifconfig: interface em9 does not exist\n"), 1000)[0] == "fail"


def test_pci():
    assert lt.read_pci(captured("pci_present")) == ("ok", "present, driver virtio-pci")
    assert lt.read_pci(captured("pci_absent"))[0] == "fail"
    assert lt.read_pci(done("none\n")) == ("ok", "present, no driver bound")


def test_dummynet():
    assert fb.read_dummynet(done("ipfw loaded\ndummynet loaded\nhz 1000\n")) == \
        ("ok", "ipfw loaded, dummynet loaded, kern.hz=1000")
    status, detail = fb.read_dummynet(done("ipfw loaded\ndummynet loadable\nhz 100\n"))
    assert status == "warn" and "kldload dummynet" in detail and "10 ms" in detail
    assert fb.read_dummynet(done("ipfw missing\ndummynet missing\nhz 1000\n"))[0] == "fail"


def test_reach_and_ssh_failures_from_real_ssh_runs():
    h = host(management="10.202.0.2", ssh_port=2222)
    rows = r.interpret_reach(h, captured("ssh_ok_uname"))
    assert rows == [("reachable", "ok", "10.202.0.2:2222"), ("host key", "ok", "matches known_hosts"),
                    ("login", "ok", "key accepted"), ("os", "ok", "Linux 6.18.44-fc-v657")]
    assert r.interpret_reach(host(os="freebsd", role="router"), captured("ssh_ok_uname"))[-1][1] == "fail"
    refused = captured("ssh_refused")
    assert r.interpret_reach(h, refused) == [("reachable", "fail", "connection refused: nothing listens on "
                                                                   "the SSH port; other checks skipped")]
    key = r.interpret_reach(h, captured("ssh_hostkey_unknown"))
    assert key[0][:2] == ("reachable", "ok") and key[1][:2] == ("host key", "fail") and "not in known_hosts" in key[1][2]
    changed = r.interpret_reach(h, captured("ssh_hostkey_changed"))
    assert changed[1][:2] == ("host key", "fail") and "CHANGED" in changed[1][2]
    denied = r.interpret_reach(h, captured("ssh_permission_denied"))
    assert [(c, s) for c, s, _ in denied] == [("reachable", "ok"), ("host key", "ok"), ("login", "fail")]
    assert "Permission denied (publickey)" in denied[2][2]
    assert r.interpret_reach(h, captured("ssh_no_route"))[0][1:] == ("fail", "no route to host; other checks skipped")
    assert r.interpret_reach(h, captured("ssh_connect_timeout"))[0][1:] == \
        ("fail", "no answer (timed out); other checks skipped")
    assert r.classify_ssh("timed out after 25s", -1) == ("reachable", "no answer (timed out)")   # our own timeout
    assert r.classify_ssh("whatever", 3) is None
    # CI once saw ssh exit 255 with an empty stderr for an absent host: that is no login
    silent = r.interpret_reach(h, Completed(["uname", "-sr"], 255, "", ""))
    assert silent == [("reachable", "fail", "ssh exited 255 without a message (no answer from the host?); "
                                            "other checks skipped")]
    # a later check whose ssh failed says so instead of misreading the empty output
    assert r.interpret(r.host_checks(h)[0], refused) == ("fail", "reachable: connection refused: nothing listens "
                                                                 "on the SSH port")


def test_verdict_allows_warnings_only():
    rows = [r.Row("S1", "sender", "tools", "ok", ""), r.Row("S1", "sender", "link", "warn", "")]
    assert r.verdict(rows) == (True, "ready (1 warning(s))")
    rows.append(r.Row("R1", "router", "host key", "fail", ""))
    assert r.verdict(rows) == (False, "NOT ready: 1 failed check(s) on R1, 1 warning(s)")


def test_an_invalid_inventory_is_a_config_error_exit_2(tmp_path):
    with pytest.raises(ConfigError):
        ci.check_inventory(tmp_path / "nope.toml", None, Console())
    bad = tmp_path / "bad.toml"
    bad.write_text('[inventory]\nname = "x"\nknown_hosts = "kh"\n[[hosts]]\nname = "S1"\nrole = "nobody"\n'
                   'management = "10.0.0.1"\n')
    res = subprocess.run([str(REPO / ".venv/bin/longhaul"), "check", "--inventory", str(bad)],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert res.returncode == 2 and "bad.toml" in res.stderr and "role" in res.stderr


# -- lab: the real thing against sshd on a namespace host ------------------------------------------

def write_inventory(lab, path: Path, hosts: str) -> Path:
    path.write_text(f"""[inventory]
name = "rdylab"
ssh_user = "root"
ssh_key = "{lab.tmp / 'user_key'}"
known_hosts = "{lab.tmp / 'known_hosts'}"
{hosts}""")
    return path


def host_toml(name, role, port, address=None, interfaces=""):
    return f"""
[[hosts]]
name = "{name}"
role = "{role}"
management = "{address}"
ssh_port = {port}
{interfaces}"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    reason = lab_skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("rdylab")
    with ssh_lab(tmp, "lhrdy", "10.202.0", ports=(2222, 2223, 2224)) as lab:
        key_type, key_b64 = lab.host_key_line.split()[1:3]      # 2224 stays out of known_hosts
        (tmp / "known_hosts").write_text(lab.host_key_line + f"[{lab.host_ip}]:2223 {key_type} {key_b64}\n")
        # a NIC whose speed the kernel cannot tell: a veth that is down ("cat: speed: Invalid argument")
        subprocess.run(["ip", "-n", lab.ns_b, "link", "add", "vd0", "type", "veth", "peer", "name", "vd1"],
                       check=True, capture_output=True)
        yield lab


def rows_by(rows):
    return {(row.host, row.check): (row.status, row.detail) for row in rows}


@pytest.mark.lab
def test_a_ready_lab_through_the_cli(lab):
    """The CLI as an operator runs it, from the controller (namespace a): exit 0 with warnings."""
    hosts = (host_toml("S1", "sender", 2222, lab.host_ip,
                       '[[hosts.interfaces]]\nname = "vb"\naddress = "10.9.1.2/24"\nrate_mbps = 10000\n'
                       '[[hosts.interfaces]]\nname = "vd0"\naddress = "10.9.3.2/24"\nrate_mbps = 1000\n')
             + host_toml("D1", "receiver", 2223, lab.host_ip)
             + host_toml("controller", "controller", 22, "10.202.0.1"))
    inv = write_inventory(lab, lab.tmp / "ready.toml", hosts)
    t0 = time.monotonic()
    res = subprocess.run(["ip", "netns", "exec", lab.ns_a, str(REPO / ".venv/bin/longhaul"), "check",
                          "--config", str(REPO / "config.toml"), "--profile", "cubic-vs-bbr", "--inventory", str(inv)],
                         capture_output=True, text=True, timeout=120, cwd=lab.tmp,
                         env={**os.environ, "COLUMNS": "200"})
    print(res.stdout, res.stderr, file=sys.stderr)
    assert res.returncode == 0, res.stdout + res.stderr
    assert time.monotonic() - t0 < 60
    out = res.stdout
    for text in ("S1", "D1", "controller", "reachable", "host key", "matches known_hosts", "iperf3 fping python3 ss",
                 "available: reno bbr cubic", "link vb", "speed unknown", "clock offset", "ready"):
        assert text in out, text
    assert "NOT ready" not in out and "fail" not in out
    lab.assert_clean()


@pytest.mark.lab
def test_failures_are_named_and_unreachable_hosts_fail_fast(lab):
    hosts = (host_toml("S1", "sender", 2222, lab.host_ip,
                       '[[hosts.interfaces]]\nname = "vb"\naddress = "10.9.1.2/24"\nrate_mbps = 1000\n'
                       'pci = "0000:3b:00.0"\n[[hosts.interfaces]]\nname = "eno9"\naddress = "10.9.2.2/24"\n'
                       'rate_mbps = 1000\n')
             + host_toml("R1", "router", 2224, lab.host_ip)          # its key is not in known_hosts
             + host_toml("R2", "router", 2299, lab.host_ip)          # nothing listens there
             + host_toml("D1", "receiver", 22, "10.202.0.9"))        # no such machine on the link
    inv_path = write_inventory(lab, lab.tmp / "broken.toml", hosts)
    via = NetnsExecutor("controller", lab.ns_a, ProcessTable())
    t0 = time.monotonic()
    rows = ci.run_checks(load_inventory(inv_path), None, via=via)
    took = time.monotonic() - t0
    got = rows_by(rows)
    Console(width=200, file=sys.stderr).print(ci.table(rows, "broken lab"))
    assert took < CONNECT_TIMEOUT_S + 15, took                  # hosts in parallel, short connect timeout
    assert got[("S1", "host key")][0] == "ok" and got[("S1", "os")][0] == "ok"
    assert got[("S1", "link vb")][0] in ("ok", "warn")              # veth: 10000 when up, or unknown
    assert got[("S1", "link eno9")] == ("fail", "no such interface on this host")
    assert got[("S1", "pci 0000:3b:00.0")][0] == "fail"
    assert got[("S1", "clock offset")][0] == "ok"                    # the same clock: well under 10 ms
    assert got[("R1", "reachable")][0] == "ok"
    assert got[("R1", "host key")][0] == "fail" and "not in known_hosts" in got[("R1", "host key")][1]
    assert [k for k in got if k[0] == "R1"] == [("R1", "reachable"), ("R1", "host key")]
    assert got[("R2", "reachable")][0] == "fail" and "refused" in got[("R2", "reachable")][1]
    assert got[("D1", "reachable")][0] == "fail"
    assert r.verdict(rows)[0] is False
    lab.assert_clean()


@pytest.mark.lab
def test_missing_tools_and_exit_1(lab, capsys):
    inv = load_inventory(write_inventory(lab, lab.tmp / "tools.toml", host_toml("S1", "sender", 2222, lab.host_ip)))
    via = NetnsExecutor("controller", lab.ns_a, ProcessTable())
    rows = ci.check_host(inv, inv.host("S1"), r.Wants(tools=("iperf3", "longhaul-no-such-tool")), via=via)
    assert rows_by(rows)[("S1", "tools")] == ("fail", "missing: longhaul-no-such-tool")
    broken = write_inventory(lab, lab.tmp / "r1.toml", host_toml("R1", "router", 2224, lab.host_ip))
    assert ci.check_inventory(broken, None, Console(), via=via) == 1
    assert "NOT ready" in capsys.readouterr().out
    lab.assert_clean()
