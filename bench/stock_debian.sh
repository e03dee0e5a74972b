#!/usr/bin/env bash
# The README's commands on a stock Debian 12: a root made by mmdebstrap from Debian's archive alone
# (this machine's own apt sources, nothing else: no Go, no Rust, no InfluxData package), given this
# machine's own CAs and pip settings, a clone of this checkout in it, and `make run` (with
# STOCK_TEST=1 also `make test`) as root inside it, with PATH=/usr/sbin:/usr/bin:/sbin:/bin and an
# empty cache. Writes bench/RESULTS-stock-debian.md.
#
#   sudo bench/stock_debian.sh [ROOT]          (default /var/tmp/lh-stock-debian; removed at the end)
#
# Slow (every Debian package of the setup is installed into the root: ~10 minutes, then the run),
# so CI does not run it. The root gets /proc, /sys, /dev and a /run of its own; the lab's namespaces
# are made by the run inside and removed by it.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
root=${1:-/var/tmp/lh-stock-debian}
out="$here/bench/RESULTS-stock-debian.md"
log=$(mktemp)
[ "$(id -u)" -eq 0 ] || { echo "stock_debian.sh: needs root (mmdebstrap --mode=root, chroot)" >&2; exit 1; }
[ ! -e "$root" ] || { echo "stock_debian.sh: $root exists; remove it or name another" >&2; exit 1; }

mapfile -t mirrors < <("$here/.venv/bin/python" -c '
from longhaul.appliance.image.apt_sources import image_mirrors, read_sources
print("\n".join(image_mirrors("bookworm", read_sources())))')
mounted=()
cleanup() {
  for ((i=${#mounted[@]}-1; i>=0; i--)); do umount -R -l "${mounted[i]}" 2>/dev/null || true; done
  if findmnt -rn -o TARGET | grep -qE "^$root(/|$)"; then   # never remove through a mount left behind
    echo "stock_debian.sh: mounts left under $root; not removing it" >&2
    return
  fi
  rm -rf --one-file-system "$root"
}
trap cleanup EXIT
start=$(date +%s)
mmdebstrap --variant=minbase --mode=root --include=make,git,ca-certificates,iproute2 bookworm "$root" "${mirrors[@]}"
# the root a mount point of its own, as / is on a booted host: `ip netns exec` makes / a slave mount
mount --bind "$root" "$root"; mounted+=("$root")
for fs in proc sys dev; do mount --rbind "/$fs" "$root/$fs"; mounted+=("$root/$fs"); done
mount -t tmpfs tmpfs "$root/run"; mounted+=("$root/run")
git clone -q "$here" "$root/opt/longhaul"
cp -r "$here/../shared" "$root/opt/shared" 2>/dev/null || true
# The machine's own package configuration, as a facility's provisioning gives its hosts: its
# certificate authorities (a registry or proxy behind its own CA), pip's configuration and
# environment, a local wheel directory it names; nothing of it is written in the repo.
if compgen -G "/usr/local/share/ca-certificates/*" >/dev/null; then
  cp -r /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates >/dev/null
fi
[ ! -f /etc/pip.conf ] || cp /etc/pip.conf "$root/etc/pip.conf"
passed=()
while IFS= read -r var; do passed+=("$var=${!var}"); done < <(compgen -e | grep -E '^(PIP_|https?_proxy$|HTTPS?_PROXY$|no_proxy$|NO_PROXY$|SSL_CERT_|REQUESTS_CA_BUNDLE$)' || true)
if [ -n "${PIP_FIND_LINKS:-}" ] && [ -d "$PIP_FIND_LINKS" ]; then
  mkdir -p "$root$PIP_FIND_LINKS"; mount --bind -o ro "$PIP_FIND_LINKS" "$root$PIP_FIND_LINKS"; mounted+=("$root$PIP_FIND_LINKS")
fi
took_root=$(( $(date +%s) - start ))

inside() {
  chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 LONGHAUL_CACHE=/var/cache/lh-empty \
    "${passed[@]}" bash -c "cd /opt/longhaul && $1"
}
have() { inside "command -v $1 >/dev/null && echo yes || echo no"; }
{
  echo "# A stock Debian 12 runs the README's commands"
  echo
  echo "\`sudo bench/stock_debian.sh\` on $(date -u +%Y-%m-%d), revision $(git -C "$here" rev-parse --short HEAD):"
  echo "a root from Debian's archive alone (mmdebstrap, ${took_root} s), PATH=/usr/sbin:/usr/bin:/sbin:/bin."
  echo "In it before the setup: go $(have go), cargo $(have cargo), telegraf $(have telegraf)."
  echo
} > "$out"

status=0
t0=$(date +%s)
inside "make run" > "$log" 2>&1 || status=$?
{
  echo "## make run: exit $status in $(( $(date +%s) - t0 )) s"
  echo
  echo '```'
  grep -E '^longhaul setup:|^report:|^/opt/longhaul/runs/' "$log" || true
  echo '```'
  echo
  echo "After it: go $(have go), cargo $(have cargo), telegraf $(have telegraf); the Telegraf and InfluxDB 2.x"
  echo "steps say why they skipped (above)."
} >> "$out"
if [ "${STOCK_TEST:-0}" = 1 ] && [ "$status" = 0 ]; then
  t0=$(date +%s)
  tstatus=0
  inside "make test PYTEST_ARGS='-p no:cacheprovider -q -rfs'" > "$log" 2>&1 || tstatus=$?
  {
    echo
    echo "## make test: exit $tstatus in $(( $(date +%s) - t0 )) s"
    echo
    echo '```'
    grep -E '^SKIPPED|^FAILED|passed|failed' "$log" | tail -60 || true
    echo '```'
  } >> "$out"
  [ "$tstatus" = 0 ] || status=$tstatus
fi
cat "$out"
[ "$status" = 0 ] || { echo "the whole output: $log" >&2; exit "$status"; }
rm -f "$log"
