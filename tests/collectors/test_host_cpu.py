from longhaul.collectors.live.host_cpu import StealMeter, cpu_times, steal_percent

# /proc/stat of this dev VM (Linux 6.18, 2 vCPUs), two reads 5 s apart while the lab was busy
BEFORE = "cpu  172860 87708 183302 1187534 7837 0 70676 265454 0 0\ncpu0 86000 40000 90000 590000 3900 0 35000 130000 0 0\n"
AFTER = "cpu  172900 87708 183700 1188000 7837 0 70900 265900 0 0\n"


def test_cpu_times_reads_aggregate_line():
    steal, total = cpu_times(BEFORE)
    assert steal == 265454
    assert total == 172860 + 87708 + 183302 + 1187534 + 7837 + 0 + 70676 + 265454


def test_steal_percent_over_interval():
    pct = steal_percent(cpu_times(BEFORE), cpu_times(AFTER))
    # 446 of 40+398+466+224+446 jiffies
    assert pct == round(100 * 446 / (40 + 398 + 466 + 224 + 446), 1)


def test_missing_or_old_format_gives_none():
    assert cpu_times("intr 1 2 3\n") is None
    assert cpu_times("cpu  1 2 3 4\n") is None          # pre-2.6.11 kernels had no steal field
    assert steal_percent(None, (1, 2)) is None
    assert steal_percent((5, 10), (5, 10)) is None


def test_meter_on_this_host(tmp_path):
    with StealMeter() as meter:
        sum(range(100000))
    assert meter.percent is None or 0.0 <= meter.percent <= 100.0
    missing = StealMeter(tmp_path / "nope")
    with missing:
        pass
    assert missing.percent is None
