"""The lab inventory: the shipped example loads, and every mistake names file, line, key, allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from longhaul.core.errors import ConfigError
from longhaul.hardware.backends.ssh.inventory import inventory_path, load_inventory
from longhaul.hardware.executors.process import ProcessTable

EXAMPLE = Path(__file__).resolve().parents[2] / "hardware" / "example-inventory.toml"

MINIMAL = """\
[inventory]
name = "t"
ssh_key = "id_test"
known_hosts = "known_hosts"

[[hosts]]
name = "S1"
role = "sender"
management = "192.0.2.11"
[[hosts.interfaces]]
name = "eth0"
address = "10.1.1.2/24"
rate_mbps = 1000

[[hosts]]
name = "D1"
role = "receiver"
management = "192.0.2.21"
[[hosts.interfaces]]
name = "eth0"
address = "10.2.1.2/24"
rate_mbps = 1000

[[hosts]]
name = "R1"
role = "router"
management = "192.0.2.31"

[[hosts]]
name = "R2"
role = "router"
os = "freebsd"
management = "r2.lab.example"

[bottleneck]
r1 = "R1"
r2 = "R2"

[[pairs]]
sender = "S1"
receiver = "D1"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "inv.toml"
    path.write_text(text)
    return path


def error_for(tmp_path: Path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_inventory(write(tmp_path, text))
    return info.value


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    seen = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            seen += 1
            if seen == occurrence:
                return number
    raise AssertionError(needle)


def test_the_shipped_example_loads_with_its_helpers():
    inv = load_inventory(EXAMPLE)
    assert [(s.name, d.name) for s, d in inv.pair_hosts()] == [("S1", "D1"), ("S2", "D2")]
    assert [h.name for h in inv.by_role("router")] == ["R1", "R2"]
    assert [h.name for h in inv.by_role("controller")] == ["controller"]
    assert [h.name for h in inv.routers()] == ["R1", "R2"]
    assert inv.host("S2").interfaces[0].pci == "0000:3b:00.0"
    assert inv.host("D2").ssh_port == 2222
    # relative paths are relative to the inventory file, made absolute at load
    assert inv.inventory.known_hosts == str(EXAMPLE.parent / "keys" / "known_hosts")
    assert inv.ssh_key(inv.host("S1")) == str(EXAMPLE.parent / "keys" / "longhaul_ed25519")
    assert inv.ssh_user(inv.host("S1")) == "root"
    assert inv.inventory.trust_on_first_use is False
    with pytest.raises(ValueError):
        inv.by_role("switch")


def test_an_executor_comes_from_the_inventory(tmp_path):
    inv = load_inventory(write(tmp_path, MINIMAL))
    ex = inv.executor("R2", ProcessTable())
    argv = ex.ssh_argv("true")
    assert "root@r2.lab.example" in argv and "StrictHostKeyChecking=yes" in argv
    assert f"UserKnownHostsFile={tmp_path / 'known_hosts'}" in argv
    assert argv[argv.index("-i") + 1] == str(tmp_path / "id_test")


def test_a_minimal_inventory_loads(tmp_path):
    inv = load_inventory(write(tmp_path, MINIMAL))
    assert inv.host("R2").os == "freebsd" and inv.inventory.ssh_user == "root"


@pytest.mark.parametrize("old, new, needle, key, allowed", [
    # field checks (pydantic), reported at the line that wrote the key
    ('role = "receiver"', 'role = "reciever"', 'role = "reciever"', "hosts[1].role", "sender"),
    ('address = "10.2.1.2/24"', 'address = "10.2.1.2"', 'address = "10.2.1.2"',
     "hosts[1].interfaces[0].address", "prefix length"),
    ('rate_mbps = 1000\n\n[[hosts]]\nname = "D1"', 'rate_mbps = 1000\npci = "3b:00.0"\n\n[[hosts]]\nname = "D1"',
     'pci = "3b:00.0"', "hosts[0].interfaces[0].pci", "e.g. 0000:3b:00.0"),
    ('management = "192.0.2.21"', 'management = "root@192.0.2.21:22"', 'management = "root@',
     "hosts[1].management", "DNS name"),
    ('name = "R1"\nrole = "router"', 'name = "R1"\nrole = "router"\ncolour = "red"', 'colour = "red"',
     "hosts[2].colour", "allowed here"),
    # cross-checks, also at the offending line
    ('sender = "S1"', 'sender = "S9"', 'sender = "S9"', "pairs[0].sender", "a host of this inventory"),
    ('receiver = "D1"', 'receiver = "R1"', 'receiver = "R1"', "pairs[0].receiver", "role = 'receiver'"),
    ('r2 = "R2"', 'r2 = "D1"', 'r2 = "D1"', "bottleneck.r2", "role = 'router'"),
    ('address = "10.2.1.2/24"', 'address = "10.1.1.2/16"', 'address = "10.1.1.2/16"',
     "hosts[1].interfaces[0].address", "an address used once"),
    ('management = "192.0.2.21"', 'management = "192.0.2.11"', 'management = "192.0.2.11"',
     "hosts[1].management", "a management address used once"),
    ('name = "D1"', 'name = "S1"', 'name = "S1"', "hosts[1].name", "unique"),
    ('name = "S1"\nrole = "sender"', 'name = "S1"\nrole = "sender"\nos = "freebsd"', 'os = "freebsd"',
     "hosts[0].os", "routers only"),
    ('name = "S1"\nrole = "sender"', 'name = "S1"\nrole = "sender"\nos = "plan9"', 'os = "plan9"',
     "hosts[0].os", "'linux' or 'freebsd'"),     # the host OS modules there are (hardware/routers/)
])
def test_mistakes_name_file_line_key_and_what_is_allowed(tmp_path, old, new, needle, key, allowed):
    assert old in MINIMAL
    text = MINIMAL.replace(old, new, 1)
    err = error_for(tmp_path, text)
    occurrence = 2 if needle in ('name = "S1"', 'management = "192.0.2.11"') else 1
    assert err.path == tmp_path / "inv.toml"
    assert err.line == line_of(text, needle, occurrence), str(err)
    rendered = str(err)
    assert rendered.startswith(f"{tmp_path / 'inv.toml'}:{err.line}: {key}"), rendered
    assert allowed in rendered, rendered


def test_pci_addresses_take_the_sysfs_form(tmp_path):
    text = MINIMAL.replace('rate_mbps = 1000\n\n[[hosts]]\nname = "D1"',
                           'rate_mbps = 1000\npci = "0000:AF:00.1"\n\n[[hosts]]\nname = "D1"', 1)
    assert load_inventory(write(tmp_path, text)).host("S1").interfaces[0].pci == "0000:AF:00.1"
    for bad in ("0000:3b:00.8", "000:3b:00.0", "0000:3b:00", "0000:3g:00.0"):
        err = error_for(tmp_path, text.replace("0000:AF:00.1", bad))
        assert "hosts[0].interfaces[0].pci" in str(err) and err.line == line_of(text, "pci =")


def test_keys_are_required_for_every_host_but_the_controller(tmp_path):
    text = MINIMAL.replace('ssh_key = "id_test"\n', "")
    err = error_for(tmp_path, text)
    assert "hosts[0].ssh_key" in str(err) and "keys only" in str(err)
    assert err.line == line_of(text, 'name = "S1"') - 1          # the [[hosts]] header
    per_host = text.replace('role = "sender"', 'role = "sender"\nssh_key = "a"')
    err = error_for(tmp_path, per_host)
    assert "hosts[1].ssh_key" in str(err)


def test_a_router_has_one_bottleneck_interface_and_only_routers_have_one(tmp_path):
    text = MINIMAL.replace('management = "192.0.2.31"\n',
                           'management = "192.0.2.31"\n[[hosts.interfaces]]\nname = "em0"\n'
                           'address = "10.1.1.1/24"\nrate_mbps = 1000\n')
    err = error_for(tmp_path, text)
    assert "hosts[2].interfaces" in str(err) and "exactly one" in str(err)
    fixed = text.replace('address = "10.1.1.1/24"\nrate_mbps = 1000\n',
                         'address = "10.1.1.1/24"\nrate_mbps = 1000\nlink = "bottleneck"\n')
    assert load_inventory(write(tmp_path, fixed)).host("R1").interfaces[0].link == "bottleneck"
    wrong = MINIMAL.replace('address = "10.1.1.2/24"\nrate_mbps = 1000\n',
                            'address = "10.1.1.2/24"\nrate_mbps = 1000\nlink = "bottleneck"\n', 1)
    err = error_for(tmp_path, wrong)
    assert "hosts[0].interfaces[0].link" in str(err) and err.line == line_of(wrong, 'link = "bottleneck"')


def test_pairs_need_routers_and_distinct_hosts(tmp_path):
    text = MINIMAL.replace('[bottleneck]\nr1 = "R1"\nr2 = "R2"\n', "")
    assert "[bottleneck]" in str(error_for(tmp_path, text))
    twice = MINIMAL + '\n[[pairs]]\nsender = "S1"\nreceiver = "D1"\n'
    err = error_for(tmp_path, twice)
    assert "pairs[1].sender" in str(err) and err.line == line_of(twice, 'sender = "S1"', 2)
    same = MINIMAL.replace('r2 = "R2"', 'r2 = "R1"')
    assert "bottleneck.r2" in str(error_for(tmp_path, same))


def test_unknown_inventory_file_and_bad_toml(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_inventory(tmp_path / "missing.toml")
    assert "cannot read" in str(info.value)
    err = error_for(tmp_path, MINIMAL + "\n[[hosts]\n")
    assert "not valid TOML" in str(err)


def test_inventory_path_is_named_from_config():
    assert inventory_path("uofa", Path("/x")) == Path("/x/hardware/uofa.toml")
    with pytest.raises(ConfigError):
        inventory_path("../etc/passwd", Path("/x"))


GENERATOR = """
[[hosts]]
name = "G1"
role = "generator"
management = "192.0.2.41"
trex_path = "/opt/trex/v3.04"
[[hosts.interfaces]]
name = "trex0"
address = "10.1.3.2/24"
rate_mbps = 10000
pci = "0000:3b:00.0"
"""


def test_a_generator_has_its_trex_tree_and_dpdk_ports(tmp_path):
    text = MINIMAL.replace("\n[bottleneck]", GENERATOR + "\n[bottleneck]")
    inv = load_inventory(write(tmp_path, text))
    assert inv.generator().name == "G1" and inv.generator().trex_path == "/opt/trex/v3.04"
    assert load_inventory(write(tmp_path, MINIMAL)).generator() is None
    no_tree = text.replace('trex_path = "/opt/trex/v3.04"\n', "")
    err = error_for(tmp_path, no_tree)
    assert "hosts[4].trex_path" in str(err) and "TRex release tree" in str(err)
    no_pci = text.replace('pci = "0000:3b:00.0"\n', "")
    assert "at least one interface with pci" in str(error_for(tmp_path, no_pci))
    elsewhere = MINIMAL.replace('role = "sender"\n', 'role = "sender"\ntrex_path = "/opt/trex"\n')
    err = error_for(tmp_path, elsewhere)
    assert "hosts[0].trex_path" in str(err) and err.line == line_of(elsewhere, "trex_path")
    two = text.replace("\n[bottleneck]", GENERATOR.replace('"G1"', '"G2"').replace("192.0.2.41", "192.0.2.42")
                       .replace("10.1.3.2", "10.1.4.2") + "\n[bottleneck]")
    assert "at most one generator" in str(error_for(tmp_path, two))


DPDK_PORT = """[[hosts.interfaces]]
name = "dpdk0"
address = "10.1.1.3/24"
rate_mbps = 10000
pci = "0000:3b:00.1"
dpdk = true
"""


def test_a_sender_s_dpdk_port_is_a_second_access_interface_with_a_pci_address(tmp_path):
    after_s1 = 'rate_mbps = 1000\n\n[[hosts]]\nname = "D1"'
    text = MINIMAL.replace(after_s1, "rate_mbps = 1000\n" + DPDK_PORT + '\n[[hosts]]\nname = "D1"')
    port = load_inventory(write(tmp_path, text)).host("S1").interfaces[1]
    assert (port.dpdk, port.pci, port.ip) == (True, "0000:3b:00.1", "10.1.1.3")
    no_pci = text.replace('pci = "0000:3b:00.1"\n', "")
    err = error_for(tmp_path, no_pci)
    assert "hosts[0].interfaces[1].pci" in str(err) and "DPDK port's PCI address" in str(err)
    # the first access interface carries the TCP flows and the RTT probe: never DPDK's
    first = MINIMAL.replace('address = "10.1.1.2/24"\nrate_mbps = 1000\n',
                            'address = "10.1.1.2/24"\nrate_mbps = 1000\npci = "0000:3b:00.0"\ndpdk = true\n', 1)
    assert "a second access interface" in str(error_for(tmp_path, first))
    on_receiver = MINIMAL.replace('address = "10.2.1.2/24"\nrate_mbps = 1000\n',
                                  'address = "10.2.1.2/24"\nrate_mbps = 1000\npci = "0000:3b:00.0"\ndpdk = true\n')
    err = error_for(tmp_path, on_receiver)
    assert "hosts[1].interfaces[0].dpdk" in str(err) and "only on a sender" in str(err)
