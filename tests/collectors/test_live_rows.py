"""live.csv: a trial's provisional view, a row per flow each second, readable as it is written and
gone once the trial is stored."""
from __future__ import annotations

from longhaul.collectors.store.format import LIVE_CSV
from longhaul.collectors.store.live_rows import LiveRows, load_live


def test_one_row_per_flow_each_second_readable_while_written_and_removed_at_the_end(tmp_path):
    rows = LiveRows(tmp_path)
    for k in range(7):                                  # progress ticks every 0.5 s
        rows.tick(k * 0.5, {"fg": {"mbps": 100.0 + k}, "bg": {"mbps": None}}, 20.0 + k)
    rates, rtt = load_live(tmp_path)                    # the file is still open
    assert list(rates) == ["fg"] and list(rates["fg"][0]) == [0.0, 1.0, 2.0, 3.0]
    assert list(rates["fg"][1]) == [100.0, 102.0, 104.0, 106.0] and list(rtt[1]) == [20.0, 22.0, 24.0, 26.0]
    with (tmp_path / LIVE_CSV).open("a") as fh:          # a line cut short by the reader's timing
        fh.write("3.5,fg,1")
    assert list(load_live(tmp_path)[0]["fg"][0]) == [0.0, 1.0, 2.0, 3.0, 3.5]
    rows.close()
    assert not (tmp_path / LIVE_CSV).exists() and load_live(tmp_path) is None


def test_before_any_flow_starts_the_probe_s_rtt_is_kept(tmp_path):
    rows = LiveRows(tmp_path)
    rows.tick(0.2, {}, 19.5)
    rates, rtt = load_live(tmp_path)
    assert rates == {} and list(rtt[1]) == [19.5]
    calls = []
    rows.chained(lambda *a: calls.append(a))(1.2, {}, None)
    assert calls == [(1.2, {}, None)]
    rows.close()
