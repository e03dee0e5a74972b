#!/usr/bin/env bash
# Build longhaul's BPF congestion controls (hardware/bpfcca/) into OUT_DIR, where the running
# kernel describes its types (BTF): the objects are CO-RE, built against this kernel's types and
# relocated to the loading kernel's. Without BTF there is nothing to build against, and nothing
# here could load them: a skip with the reason, never a failed setup.
#
#   appliance/setup/build-bpf.sh OUT_DIR
set -euo pipefail
out=${1:?usage: build-bpf.sh OUT_DIR}
if [ ! -e /sys/kernel/btf/vmlinux ]; then
  echo "skipped: this kernel has no BTF (/sys/kernel/btf/vmlinux); BPF congestion controls need it"
  exit 0
fi
make -C hardware/bpfcca OUT="$(realpath -m "$out")"
