"""The receivers' arrival meter (drivers/agents/port_meter.py, collectors/live/arrival_meter.py):
iptables counters per UDP port, parsed from captured output, and run for real in a namespace."""

import json
import os
import signal
import subprocess
import sys

import pytest
from lab_support import requires_lab, scratch_namespace

from longhaul.collectors.live.arrival_meter import meter_argv, parse
from longhaul.drivers.agents import port_meter

# `iptables -w -S INPUT -v` in a namespace with two meter rules, 10 datagrams of 1000 bytes sent to 5211
CAPTURED = """-P INPUT ACCEPT -c 0 0
-A INPUT -p udp -m udp --dport 5212 -m comment --comment longhaul-arrivals-5212 -c 0 0
-A INPUT -p udp -m udp --dport 5211 -m comment --comment longhaul-arrivals-5211 -c 10 10280
-A INPUT -p udp -m udp --dport 5213 -m comment --comment someone-else -c 4 400
"""


def test_counters_are_read_from_iptables_listing():
    assert port_meter.parse_counters(CAPTURED) == {5211: (10280, 10), 5212: (0, 0)}


def test_rules_are_one_restore_script_each_way():
    script = port_meter.rules([5211, 5212], "-I")
    assert script.startswith("*filter\n") and script.endswith("COMMIT\n")
    assert '-I INPUT -p udp -m udp --dport 5212 -m comment --comment "longhaul-arrivals-5212"' in script
    assert port_meter.rules([5211], "-D").count("-D INPUT") == 1


def test_the_meter_s_lines_are_put_on_the_trial_s_clock():
    text = (json.dumps({"ports": [5211], "source": "iptables", "rules": port_meter.COMMENT}) + "\n"
            + json.dumps({"t": 1000.25, "c": {"5211": [1028, 1]}}) + "\n" + "junk\n")
    assert parse(text, wall0=1000.0) == {5211: [(0.25, 1028, 1)]}
    assert meter_argv([5212, 5211], 0.1, remove=True)[-5:] == ["--ports", "5211,5212", "--period", "0.1", "--remove"]


def test_bad_arguments_are_refused(capsys):
    with pytest.raises(SystemExit):
        port_meter.main(["--ports", "0"])
    with pytest.raises(SystemExit):
        port_meter.main(["--ports", "5211", "--period", "0"])


@pytest.mark.lab
@requires_lab
def test_the_meter_counts_what_arrives_and_leaves_no_rule():
    with scratch_namespace() as ns:
        netns = ["ip", "netns", "exec", ns]
        proc = subprocess.Popen([*netns, *meter_argv([5211, 5212], 0.05)], stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            header = json.loads(proc.stdout.readline())          # printed once the rules are in
            assert header["ports"] == [5211, 5212] and header["rules"] == port_meter.COMMENT
            subprocess.run([*netns, sys.executable, "-c",
                            "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                            "for _ in range(25): s.sendto(b'x' * 1000, ('127.0.0.1', 5211))"], check=True)
        finally:                   # the meter's last line, at its stop, counts all that arrived
            os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
        assert proc.returncode == 0
        ticks = [json.loads(line) for line in out.splitlines()]
        assert ticks[-1]["c"]["5211"] == [25 * 1028, 25] and ticks[-1]["c"]["5212"] == [0, 0]
        assert all(a["t"] < b["t"] for a, b in zip(ticks, ticks[1:]))
        left = subprocess.run([*netns, "iptables", "-w", "-S", "INPUT"], capture_output=True, text=True).stdout
        assert port_meter.COMMENT not in left
