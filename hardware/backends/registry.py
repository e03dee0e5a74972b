"""Lab backends by the name `[lab] backend` gives (the contract: base.py). Adding a backend is one
module (or folder) plus one entry here."""

from __future__ import annotations

from longhaul.hardware.backends.base import Backend
from longhaul.hardware.backends.netns.backend import NetnsBackend
from longhaul.hardware.backends.qemu.backend import QemuBackend
from longhaul.hardware.backends.ssh.backend import SshBackend

BACKENDS: dict[str, Backend] = {
    "netns": NetnsBackend(),
    "ssh": SshBackend(),
    "qemu": QemuBackend(),
}
