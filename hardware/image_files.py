"""What an appliance image directory holds (`make image`: appliance/image/build.py writes it; the
qemu backend and netboot read it), named once, and its manifest's format."""

from __future__ import annotations

import json
from pathlib import Path

from longhaul.core.documents import DocumentFormat

RAW = "longhaul.raw"                   # the disk: GPT, BIOS and UEFI (Secure Boot) from one file
VMLINUZ = "vmlinuz"                    # the newest kernel and its initrd, for PXE
INITRD = "initrd.img"
SQUASHFS = "filesystem.squashfs"       # the netbooted hosts' shared read-only root
MANIFEST = "manifest.json"             # what went in: the base key, the kernels, the firmware it boots by
# images from before the convention wrote a bare "format": 1
IMAGE = DocumentFormat("longhaul-image", 1, "an appliance image's manifest", legacy={1: 1})


def read_manifest(image_dir: Path) -> dict:
    """The image's manifest in the current version; OSError, ValueError (DocumentVersionError is
    one) when it is missing or not one."""
    path = Path(image_dir) / MANIFEST
    return IMAGE.read(json.loads(path.read_text()), path)
