"""A TRex traffic generator inside a lab this machine builds: in the embedded lab the namespace
G1, TRex on Linux interfaces (DPDK's af_packet driver on the generator's veth: about 1 Mpps, no
NIC bound to DPDK); in the qemu lab the VM G1, TRex on a virtio-net PCI port bound to DPDK. Its
platform configuration is generated from the lab's addresses, its server started with the lab and
stopped with it. An inventory's generator host (ssh backend) runs its own TRex instead
(docs/hardware.md).

The engineer brings the release tree (`[lab.trex] path`): TRex cannot be installed from Debian's
archive, so a lab without one has no generator and refuses `trex` flows at preflight."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pydantic import Field

from longhaul.core.errors import SettingError
from longhaul.core.model import Strict
from longhaul.drivers.tool import listening
from longhaul.drivers.trex_stl import API_SUBDIR, RPC_PORT, server_argv
from longhaul.hardware.executors.process import Executor, Process, wait_until, write_file

CONFIG_FILE = "trex_cfg.yaml"
LOG_FILE, ERR_FILE = "trex-server.log", "trex-server.err"


class TrexSection(Strict):
    """[lab.trex]: a TRex release tree on this machine, for a generator in the lab."""
    path: str                                     # the release tree: t-rex-64, automation/...
    cores: int = Field(1, ge=1, le=64)            # TRex's -c: data-path cores
    start_timeout_s: float = Field(120, gt=0, le=900)


def tree_problem(path: Path) -> str | None:
    """What a release tree lacks for longhaul to start TRex and drive it, or None."""
    if not (path / "t-rex-64").is_file() or not os.access(path / "t-rex-64", os.X_OK):
        return f"a TRex release tree with an executable t-rex-64 ({path} has none)"
    if not (path / API_SUBDIR).is_dir():
        return f"a TRex release tree with its STL client library ({path / API_SUBDIR} is missing)"
    return None


def configured_tree(section: TrexSection | None, config_dir: Path) -> TrexSection | None:
    """[lab.trex] with its path made absolute (relative to config.toml) and checked now: no lab
    is built for a generator that cannot start."""
    if section is None:
        return None
    found = (config_dir / section.path).resolve()
    problem = tree_problem(found)
    if problem:
        raise SettingError(("trex", "path"), section.path, problem)
    return section.model_copy(update={"path": str(found)})


@dataclass(frozen=True)
class TrexPort:
    iface: str | None   # the generator's interface, as its kernel names it (af_packet), or None ...
    ip: str             # TRex's address on it (the source of its packets)
    gateway: str        # the next hop TRex resolves by ARP (the lab's router)
    pci: str | None = None      # ... a PCI port bound to DPDK (0000:00:10.0)

    def interface(self, index: int) -> str:
        """The port as trex_cfg.yaml's `interfaces` names it: TRex takes a PCI address without
        its domain (bus:device.function), a Linux interface as an af_packet virtual device."""
        if self.pci:
            domain, rest = self.pci.split(":", 1)
            return rest if int(domain, 16) == 0 else self.pci
        return f"--vdev=net_af_packet{index},iface={self.iface}"


def platform_config(ports: list[TrexPort]) -> str:
    """TRex's trex_cfg.yaml for its ports. TRex runs ports in pairs; a lab generator has one port
    into R1, so the pair's other port is TRex's "dummy" placeholder. Written as JSON, which YAML
    reads as it is."""
    if not ports:
        raise ValueError("a TRex generator needs at least one port")
    interfaces = [p.interface(i) for i, p in enumerate(ports)]
    info = [{"ip": p.ip, "default_gw": p.gateway} for p in ports]
    if len(ports) % 2:
        interfaces.append("dummy")
        info.append({"ip": "0.0.0.0", "default_gw": "0.0.0.0"})
    return json.dumps([{"version": 2, "port_limit": len(interfaces), "interfaces": interfaces,
                        "port_info": info}], indent=2) + "\n"


def rpc_listening(executor: Executor) -> bool:
    out = executor.run(listening(RPC_PORT), check=False)
    return out.returncode == 0 and bool(out.stdout.strip())


def start_server(executor: Executor, section: TrexSection, ports: list[TrexPort], workdir: Path,
                 host_dir: str | None = None) -> Process:
    """TRex's server on the generator host, configured for `ports`; returned once its RPC port
    listens (the caller stops it with the lab). Its configuration is written on the host into
    host_dir, which exists (default: workdir, which a namespace shares with this machine); its log
    is kept in the lab's directory here."""
    cfg = str(PurePosixPath(host_dir or str(workdir)) / CONFIG_FILE)
    write_file(executor, cfg, platform_config(ports))
    proc = executor.start(server_argv(section.path, cfg, section.cores), label=f"trex-{executor.name}",
                          stdout=Path(workdir) / LOG_FILE, stderr=Path(workdir) / ERR_FILE)
    try:
        wait_until(lambda: proc.poll() is not None or rpc_listening(executor), section.start_timeout_s, interval=0.5,
                   what=f"TRex's RPC port {RPC_PORT} on {executor.name}")
    except BaseException:
        proc.stop()
        raise
    if proc.poll() is not None:
        tail = "\n".join((Path(workdir) / f).read_text(errors="replace")[-1000:] for f in (LOG_FILE, ERR_FILE))
        raise RuntimeError(f"TRex on {executor.name} exited ({proc.poll()}) before listening: {tail.strip()}")
    return proc
