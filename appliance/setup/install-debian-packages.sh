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
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
