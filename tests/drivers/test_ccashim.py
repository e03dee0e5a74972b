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


def test_wrap_paces_in_bytes_per_second():
    argv = ccashim.wrap(["globus-url-copy"], None, library="/opt/l.so", max_pacing_bps=8e6)
    assert argv == ["env", "LD_PRELOAD=/opt/l.so", "LONGHAUL_MAX_PACING_RATE=1000000", "globus-url-copy"]


@pytest.mark.skipif(not ccashim.library_path().exists(), reason="shim not built (make setup builds it)")
def test_every_tcp_socket_gets_the_pacing_cap():
    probe = "import socket; s = socket.socket(); print(s.getsockopt(socket.SOL_SOCKET, 47))"  # SO_MAX_PACING_RATE
    plain = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    res = subprocess.run(ccashim.wrap([sys.executable, "-c", probe], None, max_pacing_bps=20e6),
                         capture_output=True, text=True, check=True)
    assert plain != "2500000" and res.stdout.strip() == "2500000", (plain, res.stdout, res.stderr)
    assert res.stderr == ""


@pytest.mark.skipif(not ccashim.library_path().exists(), reason="shim not built (make setup builds it)")
def test_reuse_address_on_every_tcp_socket():
    probe = "import socket; s = socket.socket(); print(s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR))"
    res = subprocess.run(ccashim.wrap([sys.executable, "-c", probe], None, reuse_address=True),
                         capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "1" and res.stderr == ""
    assert ccashim.wrap(["x"], None, library="/l.so", reuse_address=True) == ["env", "LD_PRELOAD=/l.so",
                                                                             "LONGHAUL_REUSEADDR=1", "x"]
