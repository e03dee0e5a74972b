"""The firmware a VM of the qemu lab boots with: legacy BIOS (SeaBIOS, qemu's default), UEFI
(OVMF) or UEFI with Secure Boot (OVMF's Secure Boot build, whose variable store has Microsoft's
and the usual keys enrolled: Debian's `ovmf` package). A registry: the lab's `firmware` key names
an entry; each VM gets its own copy of the variable store, so boot entries a VM writes stay its
own. Secure Boot needs SMM, so its VMs are q35 machines with the flash's secure property on."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

OVMF = Path("/usr/share/OVMF")


@dataclass(frozen=True)
class Firmware:
    name: str
    machine: str                              # -machine
    code: Path | None = None                  # OVMF's code, read-only flash
    variables: Path | None = None             # its variable store, copied per VM
    extra: tuple[str, ...] = ()

    def missing(self) -> str | None:
        """Why this machine cannot boot a VM with it, or None."""
        absent = [str(p) for p in (self.code, self.variables) if p is not None and not p.is_file()]
        return f"{', '.join(absent)} missing (Debian's ovmf package; make setup installs it)" if absent else None

    def argv(self, nvram: Path | None) -> list[str]:
        """qemu's arguments; `nvram` is where this VM's copy of the variable store is made."""
        out = ["-machine", self.machine, *self.extra]
        if self.code is not None:
            assert self.variables is not None and nvram is not None
            shutil.copyfile(self.variables, nvram)
            out += ["-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={self.code}",
                    "-drive", f"if=pflash,format=raw,unit=1,file={nvram}"]
        return out


FIRMWARE = {
    "bios": Firmware("bios", "pc"),
    "uefi": Firmware("uefi", "pc", OVMF / "OVMF_CODE_4M.fd", OVMF / "OVMF_VARS_4M.fd"),
    "uefi-secureboot": Firmware("uefi-secureboot", "q35,smm=on", OVMF / "OVMF_CODE_4M.secboot.fd",
                                OVMF / "OVMF_VARS_4M.ms.fd", ("-global", "driver=cfi.pflash01,property=secure,value=on")),
}
