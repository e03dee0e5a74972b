"""appliance/setup/install-debian-packages.sh against stand-ins for dpkg-query, apt-get and
systemctl: it installs only what is missing, keeps packaged daemons from starting while it
installs, disables the daemons of the packages it installed (not those the host had) and leaves a
policy-rc.d it did not write alone."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "appliance" / "setup" / "install-debian-packages.sh"

# dpkg-query: -W reports the packages in $INSTALLED as installed; -S names the owner of a unit file
DPKG_QUERY = r"""#!/bin/sh
if [ "$1" = "-W" ]; then
  for arg; do pkg=$arg; done
  case " $INSTALLED " in *" $pkg "*) printf 'install ok installed'; exit 0;; esac
  exit 1
fi
if [ "$1" = "-S" ]; then
  shift
  for f in "$@"; do
    case "$f" in
      /lib/systemd/system/nfs-ganesha.service) echo "nfs-ganesha: $f";;
      /lib/systemd/system/ssh.service) echo "openssh-server: $f";;
      *) echo "dpkg-query: no path found matching pattern $f" >&2;;
    esac
  done
  exit 1   # dpkg-query fails when any pattern matched nothing
fi
exit 2
"""
APT_GET = r"""#!/bin/sh
echo "apt-get $* policy=$(test -x "$LONGHAUL_POLICY_RC_D" && "$LONGHAUL_POLICY_RC_D"; echo $?)" >> "$LOG"
"""
SYSTEMCTL = r"""#!/bin/sh
echo "systemctl $*" >> "$LOG"
"""
ID = """#!/bin/sh
echo 0
"""


@pytest.fixture
def stubs(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("dpkg-query", DPKG_QUERY), ("apt-get", APT_GET), ("systemctl", SYSTEMCTL), ("id", ID)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "log"
    log.touch()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(log),
           "LONGHAUL_POLICY_RC_D": str(tmp_path / "policy-rc.d")}
    return tmp_path, env, log


def _run(tmp_path, env, packages, installed):
    listing = tmp_path / "packages.txt"
    listing.write_text("# comment\n" + "\n".join(packages) + "\n")
    return subprocess.run(["bash", str(SCRIPT), str(listing)], env={**env, "INSTALLED": " ".join(installed)},
                          capture_output=True, text=True, timeout=30)


def test_nothing_missing_touches_nothing(stubs):
    tmp_path, env, log = stubs
    res = _run(tmp_path, env, ["iperf3", "nfs-ganesha"], ["iperf3", "nfs-ganesha"])
    assert res.returncode == 0 and log.read_text() == ""


def test_installs_the_missing_with_services_held_and_disables_only_their_daemons(stubs):
    tmp_path, env, log = stubs
    res = _run(tmp_path, env, ["iperf3", "nfs-ganesha", "openssh-server"], ["iperf3", "openssh-server"])
    assert res.returncode == 0, res.stderr
    lines = log.read_text().splitlines()
    install = [line for line in lines if line.startswith("apt-get") and " install " in line]
    # only the missing package, and while it installs, policy-rc.d answers 101 (no service starts)
    assert len(install) == 1 and "nfs-ganesha" in install[0] and "iperf3" not in install[0]
    assert install[0].endswith("policy=101")
    # nfs-ganesha came with this run: its daemon is disabled; the host's own sshd is not touched
    assert "systemctl disable nfs-ganesha.service" in lines
    assert not any("ssh" in line for line in lines if line.startswith("systemctl"))
    assert not (tmp_path / "policy-rc.d").exists()          # ours is removed afterwards


def test_a_policy_the_host_has_is_left_alone(stubs):
    tmp_path, env, log = stubs
    policy = tmp_path / "policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 0\n")
    policy.chmod(0o755)
    res = _run(tmp_path, env, ["nfs-ganesha"], [])
    assert res.returncode == 0, res.stderr
    assert policy.read_text() == "#!/bin/sh\nexit 0\n"
    assert any(line.endswith("policy=0") for line in log.read_text().splitlines() if " install " in line)
