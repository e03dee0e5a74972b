"""Per-flow sRTT and retransmissions over time from tcpinfo.csv (seed 004's network view)."""
import csv

from longhaul.collectors.store.reader import load_trial_series
from longhaul.reports import plots

COLUMNS = ["t_s", "flow", "src", "sport", "dst", "dport", "cwnd", "bytes_in_flight", "srtt_ms", "rttvar_ms",
           "retrans_total", "delivery_rate_mbps", "bytes_acked"]


def _write(trial_dir, rows):
    with open(trial_dir / "tcpinfo.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(COLUMNS)
        writer.writerows(rows)


def test_srtt_is_the_largest_socket_and_retransmissions_are_per_second(tmp_path):
    rows = []
    for tick in range(25):                      # 2.5 s at 10 Hz, two sockets of flow "gf"
        t = tick / 10
        rows.append([t, "gf", "10.1.1.2", 4000, "10.2.1.2", 5301, 10, 1000, 20 + tick, 1, tick // 5, 1, 1])
        rows.append([t, "gf", "10.1.1.2", 4001, "10.2.1.2", 5301, 10, 1000, 30.0, 1, 0, 1, 1])
    _write(tmp_path, rows)
    series = load_trial_series(tmp_path)
    t, srtt = series.srtt["gf"]
    assert t[0] == 0.0 and srtt[0] == 30.0 and srtt[-1] == 44.0
    t, rtx = series.retrans["gf"]
    # retrans_total 0,0,0,0,0,1,...,4: 1 in second 0 (t 0.5), 2 in second 1, 1 in second 2
    assert list(t) == [1.0, 2.0, 3.0] and list(rtx) == [1.0, 2.0, 1.0]
    assert series.inflight["gf"][1][0] == 2000
    assert plots.flow_rtt_timeseries("c", 1, series, {"gf": "#000"}, 20.0).startswith("<svg")
    assert plots.flow_retrans_timeseries("c", 1, series, {"gf": "#000"}).startswith("<svg")


def test_no_retransmissions_no_figure(tmp_path):
    _write(tmp_path, [[0.1, "f", "a", 1, "b", 2, 10, 0, 5.0, 1, 0, 1, 1]])
    series = load_trial_series(tmp_path)
    assert plots.flow_retrans_timeseries("c", 1, series, {}) is None
