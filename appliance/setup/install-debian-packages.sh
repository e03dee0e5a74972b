#!/usr/bin/env bash
# Install the Debian packages listed in $1 that are not installed yet; no-op when all are there.
set -euo pipefail
list=${1:?usage: install-debian-packages.sh LIST}
mapfile -t wanted < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$list")
missing=()
for pkg in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "longhaul setup: these Debian packages are missing and installing them needs root: ${missing[*]}" >&2
  exit 1
fi
echo "longhaul setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# The packages' own daemons (sshd on 22, nfs-ganesha on 2049, GridFTP on 2811, an iperf3 server)
# must not start on this host because longhaul was set up: longhaul runs its servers itself, in
# its namespaces, by pid. policy-rc.d (Debian's hook for this) stops the install from starting
# them; a policy the host already has is left alone.
policy=${LONGHAUL_POLICY_RC_D:-/usr/sbin/policy-rc.d}   # overridable for the setup test
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# longhaul setup: no service starts while its packages install\nexit 101\n' > "$policy"
  chmod 755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
# ... and they stay off at the next boot, for the packages this run installed (not ones the host had)
quiet_units=(ssh.service ssh.socket nfs-ganesha.service nfs-ganesha-lock.service
             globus-gridftp-server.service globus-gridftp-sshftp.service iperf3.service)
for unit in "${quiet_units[@]}"; do
  owner=$({ dpkg-query -S "/lib/systemd/system/$unit" "/usr/lib/systemd/system/$unit" 2>/dev/null || true; } \
          | head -n 1 | cut -d: -f1)
  [ -n "$owner" ] || continue
  for pkg in "${missing[@]}"; do
    if [ "$pkg" = "$owner" ]; then
      echo "longhaul setup: disabling $unit (installed now, by $pkg)"
      systemctl disable "$unit" >/dev/null 2>&1 || true
    fi
  done
done
