"""The live display's RTT in interval mode comes from the tail of fping's output so far."""
from pathlib import Path

from longhaul.collectors.rtt_probe import RttProbe
from longhaul.drivers import fping

DATA = Path(__file__).parent / "data" / "fping_interval.txt"


def test_latest_interval_reply_is_the_last_reply_line(tmp_path):
    out = tmp_path / "fping.txt"
    text = DATA.read_text()
    out.write_text(text)
    probe = RttProbe(executor=None, target="D1", mode="interval", raw_path=out)
    replies = [r for r in map(fping.parse_interval_line, text.splitlines()) if r]
    assert probe.latest() == replies[-1].rtt_ms


def test_nothing_yet(tmp_path):
    assert RttProbe(executor=None, target="D1", mode="interval", raw_path=tmp_path / "none").latest() is None
