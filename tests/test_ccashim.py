import subprocess
import sys

import pytest

from longhaul.drivers import ccashim

PROBE = ("import socket; s = socket.socket(); "
         "print(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b'\\0').decode())")


def test_wrap_prefixes_env():
    argv = ccashim.wrap(["globus-url-copy", "-p", "8"], "cubic", library="/opt/l.so")
    assert argv == ["env", "LD_PRELOAD=/opt/l.so", "LONGHAUL_TCP_CCA=cubic", "globus-url-copy", "-p", "8"]
    assert ccashim.wrap(["x"], None) == ["x"]


def _available() -> list[str]:
    with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as fh:
        return fh.read().split()


@pytest.mark.skipif(not ccashim.library_path().exists(), reason="shim not built (make setup builds it)")
def test_every_tcp_socket_gets_the_cca():
    default = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout.strip()
    wanted = next((c for c in ("cubic", "reno", "bbr") if c != default and c in _available()), None)
    if wanted is None:
        pytest.skip("only one congestion control available")
    res = subprocess.run(ccashim.wrap([sys.executable, "-c", PROBE], wanted), capture_output=True, text=True,
                         check=True)
    assert res.stdout.strip() == wanted, (default, res.stdout, res.stderr)
    assert res.stderr == ""


@pytest.mark.skipif(not ccashim.library_path().exists(), reason="shim not built (make setup builds it)")
def test_unknown_cca_is_reported_once_and_socket_kept():
    res = subprocess.run(ccashim.wrap([sys.executable, "-c", PROBE + "; socket.socket()"], "nosuchcca"),
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("longhaul-ccashim: cannot set TCP_CONGESTION nosuchcca") == 1
