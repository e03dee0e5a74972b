"""NIC offloads per profile (`[tuning] offloads = { gro = false, tso = true }`), set with ethtool on
every lab interface of a Linux host and read back.

They decide what the bottleneck sees: with TSO/GSO a sender hands its NIC (or the veth) 64 KB
segments that are cut into frames late or not at all, and GRO on a receiver or router merges
frames into one packet again, which changes ACK clocking and what a qdisc counts as one packet.
Unset, a host keeps the offloads it has (recorded by the lab fingerprint either way).

`offload_argv` is the plan (pure); `apply_offloads` applies it through an executor, reads back what
the driver really did (ethtool -K changes what it can and names the rest "[requested on]"; a
feature the driver fixes stays "[fixed]") and fails naming the interface and the feature, so a
cell never runs with offloads other than the ones it declares.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from longhaul.drivers.agents.fingerprint import Unreadable, parse_ethtool_features

# the profile's names -> the feature as `ethtool -k` prints it
FEATURES = {"gro": "generic-receive-offload", "gso": "generic-segmentation-offload",
            "tso": "tcp-segmentation-offload", "lro": "large-receive-offload",
            "sg": "scatter-gather", "rx": "rx-checksumming", "tx": "tx-checksumming"}
Offload = Literal[tuple(FEATURES)]      # what the profile schema accepts


def offload_argv(ifname: str, offloads: Mapping[str, bool]) -> list[str]:
    """ethtool -K IF gro off tso on ... (one call, so ethtool orders dependent features itself)."""
    unknown = sorted(set(offloads) - set(FEATURES))
    if unknown:
        raise ValueError(f"unknown offloads {unknown}; known: {', '.join(FEATURES)}")
    return ["ethtool", "-K", ifname, *[w for name in sorted(offloads) for w in (name, "on" if offloads[name] else "off")]]


def offload_states(text: str, names) -> dict[str, bool]:
    """`ethtool -k IF` -> each named offload's state (True: on)."""
    try:
        features = parse_ethtool_features(text)
    except Unreadable as exc:
        raise RuntimeError(str(exc)) from None
    missing = [n for n in names if FEATURES[n] not in features]
    if missing:
        raise RuntimeError(f"ethtool -k shows no {', '.join(FEATURES[n] for n in missing)}")
    return {n: features[FEATURES[n]].split()[0] == "on" for n in names}


def refused(text: str, wanted: Mapping[str, bool]) -> list[str]:
    """What the driver did not set, as `gro on (off [fixed])`."""
    features = parse_ethtool_features(text)
    return [f"{n} {word} ({state})" for n, on in sorted(wanted.items())
            for word, state in [("on" if on else "off", features.get(FEATURES[n], "absent"))]
            if state.split()[0] != word]


def read_offloads(executor, ifname: str, names) -> dict[str, bool]:
    return offload_states(executor.run(["ethtool", "-k", ifname]).stdout, list(names))


def apply_offloads(executor, ifname: str, wanted: Mapping[str, bool]) -> None:
    """Set wanted on ifname and check it took; RuntimeError naming host, interface and feature
    when the driver keeps one (read the states first, to restore them whatever happens)."""
    executor.run(offload_argv(ifname, wanted), check=False)     # its exit code says less than a read back
    problems = refused(executor.run(["ethtool", "-k", ifname]).stdout, wanted)
    if problems:
        raise RuntimeError(f"{executor.name} {ifname}: the driver kept {'; '.join(problems)}")
