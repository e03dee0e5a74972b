"""The netboot server realised: dnsmasq (DHCP and TFTP) and the HTTP server, on one interface.

`NetbootServer` writes the site (boot scripts, each host's seed and kept host key, links to the
image's kernel, initrd and root squashfs, iPXE's binaries for TFTP) into its work directory,
starts both servers through an executor (this machine, or a namespace in tests), waits until each
answers, and stops them at close(). `leases()` and `requests()` read back what was handed out
(each host's DHCP lease from dnsmasq's log, each file from the HTTP log); `summary` puts them
together per host.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from longhaul.hardware.cleanup import CleanupStack
from longhaul.hardware.executors.process import Executor, wait_until
from longhaul.hardware.image_files import INITRD, SQUASHFS, VMLINUZ
from longhaul.hardware.netboot import plan
from longhaul.hardware.netboot.plan import NetbootHost, Served
from longhaul.hardware.netboot.seed import seed_toml

log = logging.getLogger(__name__)

STATE_DIR = Path("/run/longhaul/netboot")       # servers' state files, and their TFTP roots
HTTP_LOG = "http.jsonl"
DHCP_LOG = "dnsmasq.log"
READY_TIMEOUT_S = 20.0
_ACK = re.compile(r"DHCPACK\((?P<iface>[^)]+)\) (?P<ip>\S+) (?P<mac>[0-9a-f:]{17})")
# a proxy's answer; "proxy-ignored" is its refusal
_PXE = re.compile(r"PXE\((?P<iface>[^)]+)\) (?:(?P<ip>\d+\.\d+\.\d+\.\d+) )?(?P<mac>[0-9a-f:]{17}) proxy(?!-)")


def interface_network(executor: Executor, interface: str) -> tuple[str, str]:
    """(address, network) of the interface's first IPv4 address, as `ip -j addr` reads it."""
    out = executor.run(["ip", "-j", "-4", "addr", "show", "dev", interface]).stdout
    for link in json.loads(out or "[]"):
        for a in link.get("addr_info", []):
            if a.get("family") == "inet":
                return a["local"], f"{a['local']}/{a['prefixlen']}"
    raise plan.NetbootError(f"{interface} has no IPv4 address: the server answers from one")


def host_keys(keys_dir: Path, hosts: list[NetbootHost], executor: Executor) -> dict[str, str]:
    """Each host's ed25519 host key, made once and kept: a RAM root forgets its own at every boot,
    and known_hosts must stay true. name -> the public key line."""
    keys_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    out = {}
    for host in hosts:
        key = keys_dir / plan.host_key_name(host.name)
        if not key.exists():
            executor.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", host.name, "-f", str(key)])
        out[host.name] = " ".join(Path(str(key) + ".pub").read_text().split()[:2])
    return out


def known_hosts_lines(hosts: list[NetbootHost], public: dict[str, str]) -> list[str]:
    return [f"{h.address} {public[h.name]}" for h in hosts]


@dataclass(frozen=True)
class Lease:
    host: str
    mac: str
    address: str
    t: float


class NetbootServer:
    def __init__(self, served: Served, hosts: list[NetbootHost], image_dir: Path, workdir: Path,
                 keys_dir: Path, executor: Executor, public_keys: dict[str, str]):
        """public_keys: each host's kept host key (host_keys made them in keys_dir)."""
        self.served, self.hosts, self.image_dir = served, hosts, Path(image_dir)
        self.workdir, self.keys_dir, self.executor = Path(workdir), Path(keys_dir), executor
        self.cleanup = CleanupStack()
        self.public_keys = public_keys
        self.started_at = 0.0
        self._procs: dict[str, object] = {}
        # dnsmasq reads its TFTP root after dropping to its unprivileged user: a directory it can
        # reach whatever the work directory's parents allow (a run's are root's only)
        self.tftp_dir = STATE_DIR / f"{served.interface}.tftp"

    # -- the site ------------------------------------------------------------------------------

    def _missing(self) -> list[str]:
        need = [self.image_dir / n for n in (VMLINUZ, INITRD, SQUASHFS)]
        need += [Path(plan.IPXE_DIR) / n for n in (plan.TFTP_BIOS, plan.TFTP_UEFI)]
        return [str(p) for p in need if not p.is_file()]

    def write_site(self) -> Path:
        missing = self._missing()
        if missing:
            raise plan.NetbootError(f"cannot serve without {', '.join(missing)} (make image builds the image's; "
                                    "Debian's ipxe package has iPXE's)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        tftp = self.tftp_dir
        tftp.mkdir(parents=True, exist_ok=True)
        os.chmod(tftp, 0o755)
        for name, as_ in ((plan.TFTP_BIOS, plan.TFTP_BIOS), (plan.TFTP_BIOS, "undionly.0"), (plan.TFTP_UEFI, plan.TFTP_UEFI)):
            shutil.copyfile(Path(plan.IPXE_DIR) / name, tftp / as_)    # undionly.0: proxy mode's pxe-service name
            os.chmod(tftp / as_, 0o644)
        texts = {"/boot.ipxe": plan.boot_script(self.served)}
        owners: dict[str, str] = {}
        files = {f"/{VMLINUZ}": str(self.image_dir / VMLINUZ), f"/{INITRD}": str(self.image_dir / INITRD),
                 f"/live/{SQUASHFS}": str(self.image_dir / SQUASHFS)}
        for host in self.hosts:
            texts[f"/host/{host.mac_hyphens}.ipxe"] = plan.host_script(host, self.served)
            seed_path, key_path = f"/seed/{host.name}/firstboot.toml", f"/seed/{host.name}/{plan.host_key_name(host.name)}"
            texts[seed_path] = seed_toml(host.seed)
            files[key_path] = str(self.keys_dir / plan.host_key_name(host.name))
            owners[seed_path] = owners[key_path] = host.address
        site = {"bind": self.served.address, "port": self.served.port, "log": str(self.workdir / HTTP_LOG),
                "files": files, "texts": texts, "owners": owners}
        path = self.workdir / "site.json"
        path.write_text(json.dumps(site, indent=1) + "\n")
        os.chmod(path, 0o600)
        return path

    # -- the servers ---------------------------------------------------------------------------

    def start(self) -> None:
        self.cleanup.push(f"remove {self.tftp_dir}", lambda: shutil.rmtree(self.tftp_dir, ignore_errors=True))
        site = self.write_site()
        (self.workdir / HTTP_LOG).unlink(missing_ok=True)
        self.started_at = time.time()
        http = self.executor.start([sys.executable, "-m", "longhaul.hardware.netboot.http", str(site)],
                                   label="netboot http", stderr=self.workdir / "http.err")
        self.cleanup.push(f"stop the netboot HTTP server (pid {http.pid})", lambda: http.stop())
        self._procs["http"] = http
        argv = plan.dnsmasq_argv(self.served, self.hosts, str(self.tftp_dir))
        dns = self.executor.start(argv, label="netboot dnsmasq", stderr=self.workdir / DHCP_LOG)
        self.cleanup.push(f"stop dnsmasq (pid {dns.pid})", lambda: dns.stop())
        self._procs["dnsmasq"] = dns
        wait_until(self._ready, READY_TIMEOUT_S, interval=0.1, what="the netboot servers to answer")

    def _ready(self) -> bool:
        for name, proc in self._procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"netboot {name} exited ({proc.poll()}): {proc.read_stderr()[-600:]}")
        log_text = self._dhcp_log()
        if "DHCP" not in log_text and "TFTP root" not in log_text:
            return False
        return self._http_answers()

    def _http_answers(self) -> bool:
        if self.executor.namespace() is not None:     # in a namespace: ask from there
            done = self.executor.run([sys.executable, "-c", "import sys, urllib.request; "
                                      "urllib.request.urlopen(sys.argv[1], timeout=1).read()",
                                      f"{self.served.base_url}/boot.ipxe"], check=False)
            return done.returncode == 0
        try:
            with urllib.request.urlopen(f"{self.served.base_url}/boot.ipxe", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    def alive(self) -> list[str]:
        """The servers that have exited (empty while both run)."""
        return [name for name, proc in self._procs.items() if proc.poll() is not None]

    def close(self) -> list[str]:
        return self.cleanup.close()

    # -- what was served -----------------------------------------------------------------------

    def _dhcp_log(self) -> str:
        path = self.workdir / DHCP_LOG
        return path.read_text(errors="replace") if path.exists() else ""

    def leases(self) -> list[Lease]:
        return leases(self._dhcp_log(), self.hosts)

    def requests(self) -> list[dict]:
        return read_requests(self.workdir / HTTP_LOG)


def leases(dnsmasq_log: str, hosts: list[NetbootHost]) -> list[Lease]:
    """The DHCP answers dnsmasq logged (acks, and proxy PXE answers), in order. dnsmasq's log
    carries no date: t is the line's order."""
    by_mac = {h.mac: h.name for h in hosts}
    out = []
    for n, line in enumerate(dnsmasq_log.splitlines()):
        m = _ACK.search(line) or _PXE.search(line)
        if m and m.group("mac") in by_mac:
            out.append(Lease(by_mac[m.group("mac")], m.group("mac"), m.group("ip") or "", float(n)))
    return out


def read_requests(path: Path) -> list[dict]:
    if not path.exists():
        return []
    entries = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return [e for e in entries if e.get("path")]        # not the server's own "listening" line


@dataclass(frozen=True)
class HostServed:
    """What one host was given: its lease, the files it fetched (path -> bytes), when it first and
    last asked (epoch seconds)."""
    host: str
    mac: str
    address: str
    leased: bool
    files: dict[str, int]
    first: float | None
    last: float | None

    def as_dict(self) -> dict:
        return asdict(self)


def summary(hosts: list[NetbootHost], requests: list[dict], lease_list: list[Lease]) -> list[HostServed]:
    out = []
    for host in hosts:
        mine = [r for r in requests if r.get("client") == host.address and r.get("status") == 200]
        out.append(HostServed(host.name, host.mac, host.address, any(lease.host == host.name for lease in lease_list),
                              {r["path"]: r["bytes"] for r in mine}, min((r["t"] for r in mine), default=None),
                              max((r["t"] for r in mine), default=None)))
    return out
