"""What crashed runs of the embedded lab left on this machine, and nothing else: its namespaces
and /etc/netns files. Everything a run creates is named after its tag (namespaces `lh-<tag>...`),
which the run's marker (hardware/run_marker.py) ties to its pid; a namespace is a leftover when no
live longhaul process owns its tag. Removing the namespace removes its veths, qdiscs and iptables
rules; processes still inside it are ended by pid first. The run's processes outside its
namespaces (the machine's one tcp_info probe) are its process journal's, ended before this runs.
"""

from __future__ import annotations

import re

from longhaul.hardware import run_marker
from longhaul.hardware.namespaces import NETNS_ETC, list_namespaces, remove_namespace, stale_namespaces
from longhaul.hardware.topology import NS_PREFIX

_TAGGED = re.compile(rf"^{re.escape(NS_PREFIX)}(?P<tag>[0-9a-f]{{6}})\d+-[A-Z]\d+$")
_PROBE = re.compile(rf"^{re.escape(NS_PREFIX)}probe-(?P<pid>\d+)$")


def leftovers(remove: bool) -> list[str]:
    """Namespaces (and stray /etc/netns entries) of embedded-lab runs no longer running; removed
    when asked."""
    names = set(list_namespaces())
    if NETNS_ETC.is_dir():
        names |= {p.name for p in NETNS_ETC.iterdir()}
    stale = [name for name in sorted(names)
             if (m := _TAGGED.match(name)) and not run_marker.owner_alive(m["tag"])]
    stale += stale_namespaces(_PROBE, run_marker.alive)
    if remove:
        for name in stale:
            remove_namespace(name)
    return stale
