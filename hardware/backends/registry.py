"""Lab backends by the name `[lab] backend` gives (the contract: base.py). Adding a backend is one
module (or folder) plus one entry here."""

from __future__ import annotations

from longhaul.hardware import bpf_ccas, run_marker
from longhaul.hardware.backends.base import Backend
from longhaul.hardware.backends.netns.backend import NetnsBackend
from longhaul.hardware.backends.qemu.backend import QemuBackend
from longhaul.hardware.backends.ssh.backend import SshBackend
from longhaul.hardware.executors import ssh_masters
from longhaul.hardware.netboot import service as netboot_service

BACKENDS: dict[str, Backend] = {
    "netns": NetnsBackend(),
    "ssh": SshBackend(),
    "qemu": QemuBackend(),
}


def leftovers(remove: bool) -> list[str]:
    """What runs killed without a teardown left on this machine: their journaled processes (ended
    first: a remote host's process groups end with their ssh clients), then what each backend
    names as its own (namespaces, files); removed when asked."""
    found = run_marker.stale_processes()
    if remove:
        run_marker.end_stale_processes()
    for backend in BACKENDS.values():
        found += backend.leftovers(remove)
    found += ssh_masters.leftovers(remove)  # a dead controller's shared connections (ssh and qemu)
    found += bpf_ccas.leftovers(remove)     # registered in this machine's kernel, whatever the backend
    found += netboot_service.leftovers(remove)
    if remove:
        run_marker.forget_stale()
    return found
