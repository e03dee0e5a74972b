#!/bin/sh
# Captures the real outputs tests/collectors/test_fingerprint.py parses (run as root from the repo root:
# sh tests/data/fingerprint/capture.sh). One namespace of its own, deleted at the end; qdiscs of
# the kinds longhaul's labs put on hosts and routers that this machine's kernel has (htb with a
# child, tbf, an ingress qdisc, a multi-queue veth under mq), plus this machine's own interfaces.
# netem, fq_codel and modules come from a Debian kernel: vm_capture.py.
set -eu
out=tests/data/fingerprint
ns=lh-fpcap-$$
trap 'ip netns del $ns 2>/dev/null || true' EXIT
ip netns add $ns
n() { ip netns exec $ns "$@"; }
n ip link set lo up
n ip link add a0 type veth peer name b0
n ip link add a1 numtxqueues 4 numrxqueues 4 type veth peer name b1 numtxqueues 4 numrxqueues 4
n ip link set a0 mtu 9000
for i in a0 b0 a1 b1; do n ip link set $i up; done
n tc qdisc add dev a0 root handle 1: htb default 1
n tc class add dev a0 parent 1: classid 1:1 htb rate 50mbit
n tc qdisc add dev a0 parent 1:1 handle 10: pfifo limit 1000
n tc qdisc add dev b0 root tbf rate 100mbit burst 32kb latency 50ms
n tc qdisc add dev b0 ingress
n tc -j qdisc show > $out/tc_qdisc_lab.json
tc -j qdisc show > $out/tc_qdisc_host.json
n ethtool -i a0 > $out/ethtool_i_veth.txt
n ethtool -k a0 > $out/ethtool_k_veth.txt
ethtool -i eth0 > $out/ethtool_i_virtio.txt
ethtool -k eth0 > $out/ethtool_k_virtio.txt
n ethtool -i lo > $out/ethtool_i_lo.txt 2>&1 || true
ethtool -k lh-no-such-dev > $out/ethtool_k_absent.txt 2>&1 || true
cp /proc/cpuinfo $out/cpuinfo_epyc.txt
