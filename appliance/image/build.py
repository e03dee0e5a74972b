"""Build the longhaul appliance image: a bootable raw disk, plus its kernel and initrd for PXE.

Three stages, each a pure recipe (argv lists) applied here:

1. base: mmdebstrap of Debian bookworm with packages.txt and longhaul's Python dependencies in
   /opt/longhaul/.venv. Slow (downloads), so it is cached under --cache keyed on everything it
   is made from; a fresh clone on the same machine reuses it.
2. layer: a copy of the base with this checkout of longhaul at /opt/longhaul (installed editable,
   helpers in build/), Telegraf at /usr/local/bin/telegraf, the first-boot service, the
   controller unit and longhaul-boot-kernel (boot_kernel.py).
3. disk (disk.py): GPT with a BIOS boot partition, an EFI system partition and the root file
   system (ext4 made straight from the directory); GRUB for legacy BIOS, Debian's signed shim and
   GRUB for UEFI and Secure Boot, both reading one grub.cfg with an entry per installed kernel,
   the newest the default.

    python -m longhaul.appliance.image.build --out build/image [--cache /var/cache/longhaul/image]

Output: <out>/longhaul.raw, vmlinuz, initrd.img (the newest kernel, for PXE), filesystem.squashfs
(the same root for netbooted hosts: live-boot loads it into RAM; hardware/netboot serves it),
manifest.json (what went in, the base key, the kernels).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from longhaul.appliance.image import boot_kernel, disk
from longhaul.appliance.image.apt_sources import image_mirrors, read_sources
from longhaul.hardware.image_files import IMAGE, INITRD, MANIFEST, RAW, SQUASHFS, VMLINUZ, read_manifest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SUITE = "bookworm"
RECIPE_VERSION = 4                  # bump when the base recipe changes in a way the key misses
ROOT_LABEL = disk.ROOT_LABEL
DEFAULT_CACHE = Path("/var/cache/longhaul/image")
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"
CHROOT_ENV = "PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8"
QUIET_UNITS = ("influxdb.service", "nfs-server.service", "rpcbind.service", "rpcbind.socket", "dpdk.service",
               "nfs-ganesha.service", "nfs-ganesha-lock.service", "globus-gridftp-server.service",
               "globus-gridftp-sshftp.service", "iperf3.service")
# A measurement host runs no housekeeping of its own: an apt download, a man-db rebuild or a file
# system scrub in the middle of a trial would be in its results (and under TCG e2scrub_reap alone
# kept a VM busy for 1 min 52 s of its boot, beside three other VMs booting)
HOUSEKEEPING_UNITS = ("apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer", "man-db.timer",
                      "e2scrub_all.timer", "e2scrub_reap.service", "fstrim.timer")
# H-TCP and Scalable TCP are left to the lab, which loads a cell's CCA when it needs it
# (hardware/backends/ssh/lab.py), as on any host longhaul did not install
BOOT_MODULES = ("tcp_bbr", "sch_netem", "sch_fq")
# Modules udev would load for the CPU and platform that a measurement host has no use for: it hosts
# no VMs (kvm), encrypts nothing in the kernel (SSH's ciphers are OpenSSL's, in user space) and beeps
# at no one. Under TCG their loading and the crypto self-tests held up each VM's first boot.
UNUSED_MODULES = ("kvm_amd", "kvm_intel", "kvm", "aesni_intel", "ghash_clmulni_intel", "pcspkr")
KERNEL_APPEND = f"root=LABEL={ROOT_LABEL} ro console=tty0 console=ttyS0,115200n8 net.ifnames=0"
TELEGRAF = REPO / "build/bin/telegraf"
# what `make setup` builds that the hosts run: helpers, the CCA shim, the BPF congestion controls
HELPER_DIRS = ("build/bin", "build/lib", "build/bpf")


def image_packages(path: Path = HERE / "packages.txt") -> list[str]:
    words: list[str] = []
    for line in path.read_text().splitlines():
        words += line.split("#", 1)[0].split()
    return words


def python_requirements(pyproject: Path = REPO / "pyproject.toml") -> list[str]:
    return list(tomllib.loads(pyproject.read_text())["project"]["dependencies"])


def base_key(packages: list[str], requirements: list[str]) -> str:
    """What the base is made of; not where its packages were fetched (a facility's mirror of the
    same suite gives the same base)."""
    text = json.dumps({"suite": SUITE, "packages": sorted(packages),
                       "python": sorted(requirements), "recipe": RECIPE_VERSION})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def mmdebstrap_argv(packages: list[str], requirements: list[str], target: Path, mirrors: list[str]) -> list[str]:
    """The base stage, from `mirrors` (apt_sources.image_mirrors: the machine's own). Host keys are removed (each host makes or is given its own at first boot),
    root has no password (keys only), and the serial getty is masked: the serial console carries
    the first-boot report."""
    # pip trusts the build host's CA bundle (a site proxy may re-sign PyPI; it is not kept), and
    # nothing else of the host's environment reaches the chroot (REQUESTS_CA_BUNDLE would win)
    pip = f"env -i {CHROOT_ENV} PIP_CERT=/tmp/build-host-ca.crt /opt/longhaul/.venv/bin/pip"
    hooks = [
        f'cp {HOST_CA} "$1"/tmp/build-host-ca.crt',
        'rm -f "$1"/etc/ssh/ssh_host_*',
        'chroot "$1" passwd -l root',
        'chroot "$1" systemctl mask serial-getty@ttyS0.service',
        f'chroot "$1" env -i {CHROOT_ENV} python3 -m venv --system-site-packages /opt/longhaul/.venv',
        f'chroot "$1" {pip} install --quiet --disable-pip-version-check --upgrade pip setuptools wheel',
        f'chroot "$1" {pip} install --quiet --disable-pip-version-check '
        + " ".join(_shell_word(r) for r in requirements),
        'rm -rf "$1"/root/.cache "$1"/var/cache/apt/archives/*.deb "$1"/tmp/build-host-ca.crt',
    ]
    argv = ["mmdebstrap", "--variant=minbase", "--mode=root", "--format=directory",
            "--include=" + ",".join(packages)]
    for hook in hooks:
        argv += ["--customize-hook", hook]
    return argv + [SUITE, str(target), *mirrors]


def _shell_word(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def sshd_config() -> str:
    return ("# longhaul appliance: keys only; one ed25519 host key, from the seed or made at first boot\n"
            "HostKey /etc/ssh/ssh_host_ed25519_key\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\nUseDNS no\n")


def grub_cfg(releases: list[str], append: str = KERNEL_APPEND) -> str:
    """One entry per kernel, its id the release; the newest boots unless longhaul-boot-kernel sets
    another."""
    return boot_kernel.grub_cfg(releases, append)


def fstab() -> str:
    return f"LABEL={ROOT_LABEL} / ext4 defaults,noatime 0 1\n"


NETBOOT_FSTAB = "# a netbooted root: live-boot's overlay on the fetched squashfs (it adds its own line)\n"


def squashfs_argv(tree: Path, dest: Path, kernels: list[str]) -> list[str]:
    """The netboot root: the tree without /boot (iPXE fetches the kernel and initrd) and without
    the modules of kernels other than the newest (the one netbooted), zstd at a level that
    decompresses fast on a slow host."""
    excludes = ["boot"] + [f"usr/lib/modules/{k}" for k in kernels[:-1]]
    return ["mksquashfs", str(tree), str(dest), "-noappend", "-comp", "zstd", "-Xcompression-level", "3",
            "-no-progress", "-quiet", "-no-xattrs", "-e", *excludes]


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    print("+", " ".join(argv)[:200], file=sys.stderr, flush=True)
    return subprocess.run(argv, check=True, **kw)


def build_base(cache: Path, packages: list[str], requirements: list[str], mirrors: list[str]) -> Path:
    key = base_key(packages, requirements)
    done = cache / f"base-{key}"
    if (done / ".complete").exists():
        print(f"base {key}: cached at {done}", file=sys.stderr)
        return done
    work = cache / f"base-{key}.partial"
    shutil.rmtree(work, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    run(mmdebstrap_argv(packages, requirements, work, mirrors))
    (work / ".complete").write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) + "\n")
    shutil.rmtree(done, ignore_errors=True)
    work.rename(done)
    return done


def checkout_files() -> list[str]:
    """This checkout's files as git sees them (tracked and new, not ignored)."""
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         check=True, capture_output=True).stdout.decode()
    return [f for f in out.split("\0") if f and ((REPO / f).is_file() or (REPO / f).is_symlink())]


def git_revision() -> str:
    done = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def install_telegraf(tree: Path, binary: Path | None = None) -> bool:
    """Telegraf (built by `make telegraf` where a Go >= 1.25 is: appliance/setup/build-telegraf.sh)
    at /usr/local/bin/telegraf, where collectors/live/telegraf.py looks on SSH hosts; its one copy
    in the image. source_hash() covers build/bin, so a new binary makes a new image. Without one
    (a stock Debian controller) the image has none, and says so: its hosts' telemetry then needs
    InfluxData's package on them. Whether it was installed."""
    binary = binary or TELEGRAF
    if not binary.is_file():
        print(f"no {binary}: the image has no Telegraf (make telegraf builds it where a Go >= 1.25 is)",
              file=sys.stderr)
        return False
    target = tree / "usr/local/bin/telegraf"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(binary, target)
    os.chmod(target, 0o755)
    return True


def layer(base: Path, tree: Path, sources: str = "") -> None:
    run(["cp", "-a", "--reflink=auto", f"{base}/.", str(tree)])
    dest = tree / "opt/longhaul"
    for rel in checkout_files():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if (REPO / rel).is_symlink():           # package/<folder> -> ../<folder>: relative, kept as is
            os.symlink(os.readlink(REPO / rel), target)
        else:
            shutil.copy2(REPO / rel, target)
    for sub in HELPER_DIRS:
        if (REPO / sub).is_dir():
            shutil.copytree(REPO / sub, dest / sub, dirs_exist_ok=True, ignore=shutil.ignore_patterns(TELEGRAF.name))
    install_telegraf(tree)
    run(["chroot", str(tree), "env", "-i", *CHROOT_ENV.split(), "/opt/longhaul/.venv/bin/pip", "install", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--no-build-isolation", "-e", "/opt/longhaul"])
    os.symlink("/opt/longhaul/.venv/bin/longhaul", tree / "usr/local/bin/longhaul")
    for source, name in (("firstboot.py", "longhaul-firstboot"), ("boot_kernel.py", "longhaul-boot-kernel")):
        shutil.copy2(HERE / source, tree / "usr/local/sbin" / name)
        os.chmod(tree / "usr/local/sbin" / name, 0o755)
    for unit in QUIET_UNITS:       # packaged daemons stay off unless a role asks for them
        subprocess.run(["chroot", str(tree), "systemctl", "disable", unit], capture_output=True)
    for unit in HOUSEKEEPING_UNITS:
        subprocess.run(["chroot", str(tree), "systemctl", "mask", unit], capture_output=True)
    for unit in sorted((HERE / "units").glob("*.service")):
        shutil.copy2(unit, tree / "etc/systemd/system" / unit.name)
        run(["chroot", str(tree), "systemctl", "enable", unit.name])
    (tree / "etc/ssh/sshd_config.d").mkdir(parents=True, exist_ok=True)
    (tree / "etc/ssh/sshd_config.d/longhaul.conf").write_text(sshd_config())
    (tree / "etc/fstab").write_text(fstab())
    (tree / "etc/hostname").write_text("longhaul\n")
    (tree / "etc/longhaul").mkdir(exist_ok=True)
    # seed 001's CCAs and the routers' netem ready from boot (they are modules in Debian's kernel)
    (tree / "etc/modules-load.d/longhaul.conf").write_text("".join(m + "\n" for m in BOOT_MODULES))
    (tree / "etc/modprobe.d/longhaul.conf").write_text("".join(f"blacklist {m}\n" for m in UNUSED_MODULES))
    # the sources' hash too: a dirty checkout's revision stays the same across builds, and
    # firstboot reinstalls a seeded schedule when the image changed
    (tree / "etc/longhaul/image-revision").write_text(f"{git_revision()} sources {sources}\n")
    boot = tree / "boot"
    kernels = boot_kernel.kernels_in(boot)
    shutil.copy2(boot / f"{VMLINUZ}-{kernels[-1]}", boot / VMLINUZ)          # PXE: the newest
    shutil.copy2(boot / f"{INITRD}-{kernels[-1]}", boot / INITRD)
    (boot / "grub").mkdir(exist_ok=True)
    (boot / "grub/grub.cfg").write_text(grub_cfg(kernels))


def tree_bytes(tree: Path) -> int:
    out = subprocess.run(["du", "-sb", str(tree)], check=True, capture_output=True, text=True).stdout
    return int(out.split()[0])


def source_hash(files: list[str]) -> str:
    """What the layer is made of: this checkout's files and the helpers built from them."""
    h = hashlib.sha256()
    extra = [str(p.relative_to(REPO)) for sub in HELPER_DIRS if (REPO / sub).is_dir()
             for p in sorted((REPO / sub).iterdir()) if p.is_file()]
    for rel in sorted(files) + extra:
        path = REPO / rel
        content = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
        h.update(rel.encode() + b"\0" + content + b"\0")
    return h.hexdigest()[:16]


def up_to_date(out: Path, key: str, sources: str) -> bool:
    try:
        manifest = read_manifest(out)
    except (OSError, ValueError):
        return False
    return (manifest.get("base_key"), manifest.get("source_hash")) == (key, sources) and (out / RAW).is_file()


OUTPUTS = (RAW, VMLINUZ, INITRD, SQUASHFS, MANIFEST)
KEEP_BUILT = 3                      # finished images kept in the cache (newest first)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:                  # another file system
        shutil.copy2(src, dst)


def from_cache(done: Path, out: Path) -> bool:
    """A finished image of the same base and sources (another clone, an earlier build): hard
    links, so it costs no space or time. The image is only ever read (VMs boot overlays of it)."""
    if not all((done / f).is_file() for f in OUTPUTS):
        return False
    out.mkdir(parents=True, exist_ok=True)
    for name in OUTPUTS:
        (out / name).unlink(missing_ok=True)
        _link_or_copy(done / name, out / name)
    os.utime(done)
    return True


def to_cache(out: Path, done: Path) -> None:
    tmp = done.with_name(done.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in OUTPUTS:
        _link_or_copy(out / name, tmp / name)
    shutil.rmtree(done, ignore_errors=True)
    tmp.rename(done)
    built = sorted(done.parent.glob("image-*"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in built[KEEP_BUILT:]:
        shutil.rmtree(old, ignore_errors=True)


def build(out: Path, cache: Path, force: bool = False) -> dict:
    packages, requirements = image_packages(), python_requirements()
    key, sources = base_key(packages, requirements), source_hash(checkout_files())
    if not force and up_to_date(out, key, sources):
        print(f"{out}: up to date (base {key}, sources {sources})", file=sys.stderr)
        return read_manifest(out)
    done = cache / f"image-{key}-{sources}"
    if not force and from_cache(done, out):
        print(f"{out}: from the cache {done}", file=sys.stderr)
        return read_manifest(out)
    t0 = time.monotonic()
    base = build_base(cache, packages, requirements, image_mirrors(SUITE, read_sources()))
    t_base = time.monotonic() - t0
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="lhimg-tree-", dir=cache) as tmp:
        tree = Path(tmp) / "root"
        tree.mkdir()
        layer(base, tree, sources)
        (out / MANIFEST).unlink(missing_ok=True)      # a half-replaced image is never "up to date"
        raw = out / f"{RAW}.partial"
        try:
            disk.make_disk(tree, raw, disk.disk_size_bytes(tree_bytes(tree)), cache)
        except BaseException:
            raw.unlink(missing_ok=True)
            raise
        shutil.copy2(tree / "boot" / VMLINUZ, out / VMLINUZ)
        shutil.copy2(tree / "boot" / INITRD, out / INITRD)
        kernels = boot_kernel.kernels_in(tree / "boot")
        (tree / "etc/fstab").write_text(NETBOOT_FSTAB)        # after the disk: its root keeps its own
        run(squashfs_argv(tree, out / f"{SQUASHFS}.partial", kernels), stdout=subprocess.DEVNULL)
        (out / f"{SQUASHFS}.partial").rename(out / SQUASHFS)
        raw.rename(out / RAW)
    manifest = {**IMAGE.stamp(), "suite": SUITE, "base_key": key, "source_hash": sources, "kernel": kernels[-1],
                "kernels": kernels, "revision": git_revision(), "packages": packages, "python": requirements,
                "kernel_append": KERNEL_APPEND, "root_label": ROOT_LABEL, "firmware": list(disk.FIRMWARE),
                "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "seconds": {"base": round(t_base, 1), "total": round(time.monotonic() - t0, 1)}}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    to_cache(out, done)
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="longhaul-image", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "build/image")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--force", action="store_true", help="rebuild the layer and disk even if up to date")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("longhaul-image: needs root (mmdebstrap --mode=root, chroot, a loop mount)", file=sys.stderr)
        return 2
    manifest = build(args.out, args.cache, args.force)
    print(json.dumps({k: manifest.get(k) for k in ("base_key", "kernel", "kernels", "revision", "seconds")}))
    print(args.out / RAW)
    return 0


if __name__ == "__main__":
    sys.exit(main())
