"""The run store's format, named once (docs/results-format.md): the `format` strings and the version
this longhaul writes, the directory layout, and every CSV with its columns.

Writers (the runner's file store, the trial's CSVs, the socket sampler's rows) and the reader take
their names from here, so a renamed file or column is one edit and one version decision. A change
that breaks a reader bumps CURRENT_VERSION and registers an upgrade from the old version in
upgrade.py; an added key or column does not. Both documents follow longhaul's one versioning
convention (core/documents.py).
"""

from __future__ import annotations

from pathlib import Path

from longhaul.core.documents import DocumentFormat

CURRENT_VERSION = 1                    # what this longhaul writes (both documents share it)
RUN_DOC = DocumentFormat("longhaul-run", CURRENT_VERSION, "a longhaul run store")           # manifest.json
SUMMARY_DOC = DocumentFormat("longhaul-summary", CURRENT_VERSION, "a longhaul run store")   # summary.json
RUN_FORMAT = RUN_DOC.name
SUMMARY_FORMAT = SUMMARY_DOC.name

# The run directory
MANIFEST = "manifest.json"
SUMMARY = "summary.json"
RUN_LOG = "run.log"
CONFIG_SNAPSHOT = "config.toml"        # the config as run, so `run --resume` rebuilds the same cells
PROFILES_DIR = "profiles"              # <name>.toml: the profiles as run
CELLS_DIR = "cells"
LAB_DIR = "lab"                        # lab-<k>/: a backend's working files for its k-th lab
VERIFICATION = "verification.json"     # cells/<id>/verification.json
TRIAL_PREFIX = "trial-"                # cells/<id>/trial-<k>/
TRIAL_JSON = "trial.json"
RAW_DIR = "raw"                        # the tools' own output, unchanged
CCA_STAND_INS = "cca_stand_ins"        # a cell's labels: {cca asked for: the BPF one that ran} (cca_fallback)

# The trial's tables: file name and columns, in the order they are written.
THROUGHPUT_CSV = "throughput.csv"
THROUGHPUT_COLUMNS = ("t_s", "flow", "stream", "mbps")
RTT_CSV = "rtt.csv"
RTT_COLUMNS = ("t_s", "rtt_ms", "sent", "received", "mode")
TCPINFO_CSV = "tcpinfo.csv"
TCPINFO_COLUMNS = ("t_s", "flow", "src", "sport", "dst", "dport", "cwnd", "bytes_in_flight", "srtt_ms",
                   "rttvar_ms", "retrans_total", "delivery_rate_mbps", "bytes_acked")
EVENTS_CSV = "events.csv"
EVENTS_COLUMNS = ("flow", "burst", "planned_start_s", "launched_s", "planned_stop_s", "exited_s")
# While a trial runs, and only then: each flow's delivery rate (tcp_info, the senders' view) and the
# probe's latest RTT every second, for a live view (collectors/store/live_rows.py); the trial's own
# tables replace it as the record when the trial is stored.
LIVE_CSV = "live.csv"
LIVE_COLUMNS = ("t_s", "flow", "mbps", "rtt_ms")
DECISIONS_CSV = "decisions.csv"        # only for flows whose bursts' CCA is chosen during the trial
DECISIONS_COLUMNS = ("flow", "burst", "t_s", "cca", "note")

# A cell's `labels` that mean something to longhaul itself
CALIBRATION_LABEL = "calibration"      # a regression suite's calibration cell (docs/regression.md)

# Values of `status`
RUN_STATES = ("running", "complete", "interrupted", "failed")
CELL_STATES = ("pending", "running", "complete", "failed", "refused", "interrupted", "not run")
TRIAL_STATES = ("ok", "failed", "interrupted")


class StoreError(RuntimeError):
    """The directory cannot be read as a run store at all."""


class StoreVersionError(StoreError):
    """The store's `format` or `version` is not one this reader understands."""


def cell_dir(run_dir: Path, cell_id: str) -> Path:
    return Path(run_dir) / CELLS_DIR / cell_id


def trial_dir(run_dir: Path, cell_id: str, trial: int) -> Path:
    return cell_dir(run_dir, cell_id) / f"{TRIAL_PREFIX}{trial}"

