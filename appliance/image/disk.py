"""The appliance image's disk: one GPT disk that boots by legacy BIOS, by UEFI and by UEFI with
Secure Boot, into the one /boot/grub/grub.cfg (boot_kernel.grub_cfg).

    p1  BIOS boot  1 MiB   GRUB's i386-pc core image (legacy BIOS: the MBR's boot code loads it)
    p2  ESP       64 MiB   FAT32: EFI/BOOT/BOOTX64.EFI is Debian's shim (signed by the UEFI CA),
                           which loads grubx64.efi beside it (Debian's GRUB, signed by Debian),
                           which under Secure Boot loads only kernels signed by Debian: all three
                           are Debian's signed packages, unchanged; nothing unsigned is in the chain
    p3  root      the rest ext4, LABEL longhaul-root, made straight from the tree (mke2fs -d)

Nothing is mounted and no loop device is needed (a build host's loop devices may have no
partitions): the ESP is made in a file with mtools, the BIOS stage is what grub-bios-setup does
for a BIOS boot partition (boot.img in the MBR pointing at core.img, core.img's blocklist pointing
at the rest of itself), done here on the file. The signed EFI binaries come from the machine's own
apt sources (`apt-get download`, unpacked with dpkg-deb: no package is installed on the build host,
so no maintainer script touches its boot loader), cached by file name.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

FIRMWARE = ("bios", "uefi", "uefi-secureboot")     # what this disk boots by
MiB = 1 << 20
SECTOR = 512
BIOS_BOOT = (1 * MiB, 1 * MiB)          # (offset, size)
ESP = (2 * MiB, 64 * MiB)
PART_OFFSET = ESP[0] + ESP[1]           # the root file system's partition
TAIL = 1 * MiB                          # left free at the end: the backup GPT's 33 sectors
ROOT_LABEL = "longhaul-root"
ESP_LABEL = "LH-ESP"
GPT_TYPES = {"bios": "21686148-6449-6E6F-744E-656564454649", "esp": "C12A7328-F81F-11D2-BA4B-00A0C93EC93B",
             "linux": "0FC63DAF-8483-4772-8E79-3D69D8477DE4"}
# Debian's signed EFI binaries: package -> (its file, the name on the ESP)
EFI_FILES = {"shim-signed": ("usr/lib/shim/shimx64.efi.signed", "BOOTX64.EFI"),
             "shim-helpers-amd64-signed": ("usr/lib/shim/mmx64.efi.signed", "mmx64.efi"),
             "grub-efi-amd64-signed": ("usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed", "grubx64.efi")}
I386_PC = Path("/usr/lib/grub/i386-pc")   # grub-pc-bin: GRUB's BIOS modules, boot.img
# the BIOS core image carries every module it needs: nothing is loaded from the disk after it
BIOS_MODULES = ("biosdisk", "part_gpt", "ext2", "search", "search_label", "normal", "configfile", "linux",
                "echo", "test", "serial", "terminal", "boot")
# boot.img (include/grub/i386/pc/boot.h): where core.img's first sector is, the boot drive, the
# drive check that buggy BIOSes need turned off, and the partition table it must not overwrite
KERNEL_SECTOR, BOOT_DRIVE, DRIVE_CHECK, TABLE = 0x5C, 0x64, 0x66, 0x1B8
BLOCKLIST = SECTOR - 12                 # diskboot.img's blocklist: start (u64), len (u16), segment (u16)


def sfdisk_script() -> str:
    def part(offset: int, size: int | None, kind: str, name: str) -> str:
        length = f", size={size // SECTOR}" if size else ""
        return f"start={offset // SECTOR}{length}, type={GPT_TYPES[kind]}, name={name}\n"
    return ("label: gpt\n" + part(*BIOS_BOOT, "bios", "bios-boot") + part(*ESP, "esp", "efi-system")
            + part(PART_OFFSET, None, "linux", ROOT_LABEL))


def disk_size_bytes(tree_bytes: int) -> int:
    """The tree plus a third and 512 MiB of room (logs, results), rounded to MiB."""
    size = PART_OFFSET + tree_bytes * 4 // 3 + (512 << 20) + TAIL
    return (size + MiB - 1) // MiB * MiB


def mke2fs_argv(tree: Path, disk: Path, size: int) -> list[str]:
    blocks = (size - PART_OFFSET - TAIL) // 4096
    return ["mke2fs", "-q", "-F", "-t", "ext4", "-L", ROOT_LABEL, "-b", "4096", "-E", f"offset={PART_OFFSET}",
            "-d", str(tree), str(disk), str(blocks)]


def esp_grub_cfg() -> str:
    """What Debian's signed GRUB reads on the ESP (EFI/debian/grub.cfg, its prefix; the copy in
    EFI/BOOT is its fallback): go to the root file system's own grub.cfg."""
    return (f"search --no-floppy --set=root --label {ROOT_LABEL}\n"
            "set prefix=($root)/boot/grub\nconfigfile $prefix/grub.cfg\n")


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    print("+", " ".join(argv)[:200], file=sys.stderr, flush=True)
    return subprocess.run(argv, check=True, **kw)


def efi_binaries(cache: Path) -> dict[str, Path]:
    """ESP name -> Debian's signed binary, downloaded once per package version."""
    cache.mkdir(parents=True, exist_ok=True)
    found = {}
    for package, (inside, name) in EFI_FILES.items():
        uris = run(["apt-get", "download", "--print-uris", package], capture_output=True, text=True).stdout.split()
        deb = next((w for w in uris if w.endswith(".deb")), None)
        if deb is None:
            raise RuntimeError(f"apt-get download {package}: not in this machine's apt sources")
        unpacked = cache / deb.removesuffix(".deb")
        if not (unpacked / inside).is_file():
            with tempfile.TemporaryDirectory(dir=cache) as tmp:
                run(["apt-get", "download", "-q", package], cwd=tmp, capture_output=True)
                run(["dpkg-deb", "-x", str(Path(tmp) / deb), str(Path(tmp) / "x")])
                shutil.rmtree(unpacked, ignore_errors=True)
                (Path(tmp) / "x").rename(unpacked)
        found[name] = unpacked / inside
    return found


def esp_image(path: Path, binaries: dict[str, Path]) -> None:
    run(["mkfs.fat", "-C", "-F", "32", "-n", ESP_LABEL, str(path), str(ESP[1] // 1024)], capture_output=True)
    image = ["-i", str(path)]
    run(["mmd", *image, "::/EFI", "::/EFI/BOOT", "::/EFI/debian"])
    for name, source in binaries.items():
        run(["mcopy", *image, str(source), f"::/EFI/BOOT/{name}"])
    with tempfile.NamedTemporaryFile("w", suffix=".cfg") as cfg:
        cfg.write(esp_grub_cfg())
        cfg.flush()
        for where in ("EFI/BOOT", "EFI/debian"):
            run(["mcopy", *image, cfg.name, f"::/{where}/grub.cfg"])


def bios_core(work: Path, modules_dir: Path = I386_PC) -> bytes:
    """GRUB's i386-pc core image with every module it needs and an early config that finds the
    root file system by its label; normal mode then reads its grub.cfg."""
    early = work / "early.cfg"
    early.write_text(f"search --no-floppy --set=root --label {ROOT_LABEL}\nset prefix=($root)/boot/grub\n")
    core = work / "core.img"
    run(["grub-mkimage", "-O", "i386-pc", "-d", str(modules_dir), "-o", str(core), "-c", str(early),
         "-p", "(hd0,gpt3)/boot/grub", *BIOS_MODULES])
    return core.read_bytes()


def bios_boot_sectors(mbr: bytes, boot_img: bytes, core: bytes, core_lba: int) -> tuple[bytes, bytes]:
    """(the MBR, core.img) as grub-bios-setup writes them for core.img embedded at core_lba: the
    MBR's boot code from boot.img with core.img's sector, the BIOS's drive and no drive check,
    and the disk's own signature and partition table kept; core.img's blocklist covering the
    rest of it, contiguous after its first sector."""
    if len(core) > BIOS_BOOT[1]:
        raise ValueError(f"GRUB's core image is {len(core)} bytes; the BIOS boot partition holds {BIOS_BOOT[1]}")
    sectors = (len(core) + SECTOR - 1) // SECTOR
    core = core.ljust(sectors * SECTOR, b"\0")
    boot = bytearray(boot_img[:SECTOR])
    struct.pack_into("<Q", boot, KERNEL_SECTOR, core_lba)
    boot[BOOT_DRIVE] = 0xFF
    boot[DRIVE_CHECK:DRIVE_CHECK + 2] = b"\x90\x90"
    boot[TABLE:] = mbr[TABLE:SECTOR]
    first = bytearray(core[:SECTOR])
    _, _, segment = struct.unpack_from("<QHH", first, BLOCKLIST)
    struct.pack_into("<QHH", first, BLOCKLIST, core_lba + 1, sectors - 1, segment)
    return bytes(boot), bytes(first) + core[SECTOR:]


def make_disk(tree: Path, disk: Path, size: int, cache: Path) -> None:
    with open(disk, "wb") as f:
        f.truncate(size)
    run(["sfdisk", "--quiet", str(disk)], input=sfdisk_script().encode())
    run(mke2fs_argv(tree, disk, size))
    with tempfile.TemporaryDirectory(prefix="lhimg-boot-") as tmp:
        work = Path(tmp)
        esp = work / "esp.img"
        esp_image(esp, efi_binaries(cache / "efi"))
        with open(disk, "r+b") as f:
            f.seek(ESP[0])
            f.write(esp.read_bytes())
            f.seek(0)
            mbr = f.read(SECTOR)
            boot, core = bios_boot_sectors(mbr, (I386_PC / "boot.img").read_bytes(), bios_core(work),
                                           BIOS_BOOT[0] // SECTOR)
            f.seek(0)
            f.write(boot)
            f.seek(BIOS_BOOT[0])
            f.write(core)
