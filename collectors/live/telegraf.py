"""Telegraf on every lab host for the whole life of a lab: fleet telemetry beside the trials.

Each lab host runs one Telegraf (the build with longhaul's plugins only,
appliance/setup/build-telegraf.sh) inside the host's own namespace or machine, so it sees that
host's interfaces and sockets only: interface counters (inputs.net), the kernel's TCP/IP counters
(inputs.nstat, inputs.netstat), CPU (inputs.cpu, the total only) and tcp_info of every established
socket (inputs.execd running longhaul's probe, drivers/agents/tcpinfo_probe.py `--format influx`:
Telegraf's own socketstat has no cwnd or RTT). Every point carries the run's tags (`run` and what
the caller adds: backend, kernel, ...), the host's `role`, and `host` = the lab host name.

Telegraf never talks to InfluxDB: its one output is a line-protocol file the run owns,
`<out_dir>/telegraf-<host>.lp`, and longhaul's shipper ships that file with the run's spool
(collectors/store/influx/spool.py), so nothing Telegraf measured is lost while the database is
down. On this machine's namespaces Telegraf writes that file directly; on a remote host it writes
a file in a temporary directory there, which stop() appends to the local file. Files are appended
to, so a run that builds several labs keeps one file per lab host.

The binary: build/bin/telegraf for hosts on this machine; `telegraf` on PATH or
/usr/local/bin/telegraf on SSH hosts (the appliance image installs it there).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from longhaul.core.paths import BUILD_BIN
from longhaul.hardware.executors.process import CommandError, Executor, Process, wait_until, write_file
from longhaul.hardware.executors.ssh_remote import map_paths

log = logging.getLogger(__name__)

LOCAL_BINARY = BUILD_BIN / "telegraf"
REMOTE_BINARIES = ("telegraf", "/usr/local/bin/telegraf")
PROBE_MODULE = "longhaul.drivers.agents.tcpinfo_probe"
BUFFER_LIMIT = 100_000          # metrics held per output while a write fails (the file: a full disk)
READY_TIMEOUT_S = 20.0          # Telegraf up and its first flush written, after the interval's
STOP_TIMEOUT_S = 15.0           # SIGTERM: Telegraf stops its inputs (the probe) and flushes
FETCH_TIMEOUT_S = 600.0         # a remote host's whole file, at the lab's end
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def output_name(host: str) -> str:
    """The file of a lab host's points in the run's influx directory (the shipper's telegraf-*.lp)."""
    return f"telegraf-{host}.lp"


def probe_argv(interval_s: float, python: str = sys.executable) -> list[str]:
    """The tcp_info probe in Telegraf's format, printing every interval_s on its own."""
    return [python, "-m", PROBE_MODULE, "--period", f"{interval_s:g}", "--format", "influx"]


# -- the configuration -------------------------------------------------------------------------

def _string(text: str) -> str:
    """A TOML basic string Telegraf reads back as `text`: JSON's escapes are TOML's (non-ASCII
    kept raw, so no surrogate pairs), DEL escaped as TOML wants, and `$` doubled because Telegraf
    substitutes environment variables (`$VAR`, `${VAR}`) in string values before using them."""
    return json.dumps(str(text).replace("$", "$$"), ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return _string(value)


def _table(header: str, items: dict) -> str:
    return f"{header}\n" + "".join(f"  {k} = {_value(v)}\n" for k, v in items.items()) + "\n"


def _duration(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def telegraf_config(host: str, run_id: str, tags: dict[str, str], output_path: str, interval_s: float,
                    probe_argv: list[str], *, interfaces: list[str] | None = None) -> str:
    """The TOML for one lab host: pure. interfaces: the host's lab interfaces for inputs.net
    (None: every interface that is up, except loopback). Tag keys are plain words (letters,
    digits, `_`, `-`); any value is fine."""
    interval = _duration(interval_s)
    global_tags = {k: str(v) for k, v in tags.items() if v not in (None, "")}
    global_tags["run"] = run_id
    for key in global_tags:
        if not _BARE_KEY.fullmatch(key):
            raise ValueError(f"telegraf tag key {key!r}: letters, digits, '_' and '-' only")
    net = {"interfaces": list(interfaces)} if interfaces else {}
    return "".join([
        "# Telegraf on one lab host, written by longhaul (collectors/live/telegraf.py)\n\n",
        _table("[global_tags]", global_tags),
        _table("[agent]", {
            "interval": interval, "round_interval": True, "collection_jitter": "0s",
            "flush_interval": _duration(max(interval_s, 1.0)), "flush_jitter": "0s",
            "metric_batch_size": 5000, "metric_buffer_limit": BUFFER_LIMIT, "precision": "0s",
            "hostname": host, "omit_hostname": False, "logfile": "", "quiet": False, "debug": False,
            "skip_processors_after_aggregators": True}),     # none of either; says so to Telegraf
        _table("[[inputs.cpu]]", {"percpu": False, "totalcpu": True, "collect_cpu_time": False,
                                  "report_active": True}),
        _table("[[inputs.net]]", net),
        # counters still at zero left out: most of nstat's ~250 are, and with them a host's file
        # grows by ~7 KB/s instead of well under 1 KB/s (measured on an idle namespace)
        _table("[[inputs.nstat]]", {"dump_zeros": False}),
        _table("[inputs.nstat.tagdrop]", {"name": ["snmp6"]}),    # the lab is IPv4
        _table("[[inputs.netstat]]", {}),
        _table("[[inputs.execd]]", {"command": list(probe_argv), "signal": "none", "restart_delay": "2s",
                                    "data_format": "influx"}),
        # counters as `i` integers, not `u`: InfluxDB 1.x (the image's) takes no unsigned fields
        _table("[[outputs.file]]", {"files": [output_path], "data_format": "influx", "use_batch_format": False,
                                    "influx_uint_support": False}),
    ])


# -- finding the binary ---------------------------------------------------------------------------

def is_remote(executor: Executor) -> bool:
    """Whether the host's files are another machine's (SSH, VMs) rather than this one's."""
    return executor.remote


INSTALL_HINT = ("install InfluxData's telegraf package (docs/telemetry.md), or `make telegraf` where a Go >= 1.25 "
                f"is on PATH, which builds {LOCAL_BINARY}")


def local_command() -> str | None:
    """The Telegraf of this machine: longhaul's own build, else `telegraf` on PATH (InfluxData's
    package), else None."""
    if os.access(LOCAL_BINARY, os.X_OK):
        return str(LOCAL_BINARY)
    return shutil.which("telegraf")


def missing_reason(executor: Executor) -> str:
    if is_remote(executor):
        return f"no telegraf on PATH or at {REMOTE_BINARIES[-1]}"
    return f"no telegraf here: {INSTALL_HINT}"


def telegraf_command(executor: Executor) -> str | None:
    """The Telegraf to run on the executor's host, or None when it has none."""
    if not is_remote(executor):
        return local_command()
    for candidate in REMOTE_BINARIES:
        try:
            if executor.run([candidate, "--version"], timeout=30, check=False).returncode == 0:
                return candidate
        except CommandError:
            continue
    return None


def unavailable(lab) -> dict[str, str]:
    """Lab host -> why Telegraf cannot run there (empty: it can everywhere). For preflight."""
    hosts = [h.name for h in lab.topo.hosts]
    with ThreadPoolExecutor(max_workers=min(16, len(hosts) or 1)) as pool:
        found = dict(zip(hosts, pool.map(lambda h: telegraf_command(lab.executor(h)), hosts)))
    return {h: missing_reason(lab.executor(h)) for h, command in found.items() if command is None}


# -- the fleet ------------------------------------------------------------------------------------

class _Agent:
    """One host's Telegraf: where its files are and its process."""

    def __init__(self, host: str, executor: Executor, local_output: Path):
        self.host, self.executor, self.local_output = host, executor, local_output
        self.remote_dir: str | None = None
        self.output = str(local_output)
        self.proc: Process | None = None
        self.size_before = 0


class TelegrafFleet:
    """Telegraf on every host of a built Lab: start() after build, stop() at the lab's teardown.

    out_dir: the run's influx directory (the shipper ships its telegraf-*.lp); work_dir: where
    each host's config and Telegraf's log go (default out_dir). tags: added to every point
    besides `run` and the host's `role` (e.g. backend, kernel). binary: the Telegraf to run on
    every host instead of looking for one (telegraf_command)."""

    def __init__(self, lab, run_id: str, out_dir: Path, tags: dict[str, str] | None = None,
                 interval_s: float = 1.0, work_dir: Path | None = None, binary: str | None = None):
        self.lab, self.run_id, self.out_dir = lab, run_id, Path(out_dir)
        self.binary = binary
        self.tags = dict(tags or {})
        self.interval_s = interval_s
        self.work_dir = Path(work_dir) if work_dir is not None else self.out_dir
        self.agents: dict[str, _Agent] = {}
        self.problems: dict[str, str] = {}
        self._stopped = False

    def outputs(self) -> list[Path]:
        return [agent.local_output for agent in self.agents.values()]

    def config(self, host: str, output: str, executor: Executor) -> str:
        topo = self.lab.topo
        interfaces = sorted({port.ifname for link in topo.links for port in (link.a, link.b) if port.host == host})
        argv = probe_argv(self.interval_s)
        if is_remote(executor):
            argv = map_paths(argv, executor.path_map)
        return telegraf_config(host, self.run_id, {**self.tags, "role": topo.host(host).role}, output,
                               self.interval_s, argv, interfaces=interfaces)

    def start(self) -> dict[str, str]:
        """Start Telegraf on every lab host and wait until each has written its first points.
        A host where it cannot run is logged and left out; returns those hosts and why (also
        kept in .problems). Telemetry never stops a run."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        hosts = [h.name for h in self.lab.topo.hosts]
        with ThreadPoolExecutor(max_workers=min(16, len(hosts) or 1)) as pool:
            results = list(pool.map(self._start_one, hosts))
        with ThreadPoolExecutor(max_workers=min(16, len(hosts) or 1)) as pool:
            results += list(pool.map(self._await_one, [a for a in self.agents.values() if a.proc]))
        for host, problem in results:
            if problem:
                self.problems[host] = problem
                log.warning("telegraf on %s: %s", host, problem)
        return dict(self.problems)

    def _start_one(self, host: str) -> tuple[str, str | None]:
        executor = self.lab.executor(host)
        agent = self.agents[host] = _Agent(host, executor, self.out_dir / output_name(host))
        try:
            binary = self.binary or telegraf_command(executor)
            if binary is None:
                return host, missing_reason(executor)
            local_conf = self.work_dir / f"telegraf-{host}.conf"     # kept with the run either way
            if is_remote(executor):
                agent.remote_dir = executor.run(["mktemp", "-d", "/tmp/longhaul-telegraf.XXXXXX"]).stdout.strip()
                agent.output = f"{agent.remote_dir}/{output_name(host)}"
                conf = f"{agent.remote_dir}/telegraf.conf"
                text = self.config(host, agent.output, executor)
                local_conf.write_text(text)
                write_file(executor, conf, text)
            else:
                local_conf.write_text(self.config(host, agent.output, executor))
                conf = str(local_conf)
                agent.size_before = _size(agent.local_output)
            agent.proc = executor.start([binary, "--config", conf], label=f"telegraf-{host}",
                                        stderr=self.work_dir / f"telegraf-{host}.log")
        except (CommandError, OSError) as exc:
            return host, f"could not start: {exc}"
        return host, None

    def _written(self, agent: _Agent) -> bool:
        if not is_remote(agent.executor):
            return _size(agent.local_output) > agent.size_before
        return agent.executor.run(["test", "-s", agent.output], timeout=30, check=False).returncode == 0

    def _await_one(self, agent: _Agent) -> tuple[str, str | None]:
        """Ready once the first flush reached the output file (polled, never assumed)."""
        try:
            wait_until(lambda: agent.proc.poll() is not None or self._written(agent),
                       timeout=READY_TIMEOUT_S + 2 * self.interval_s, interval=0.1 if not is_remote(agent.executor)
                       else 0.5, what=f"telegraf's first points on {agent.host}")
        except (TimeoutError, CommandError) as exc:
            return agent.host, str(exc)
        if agent.proc.poll() is not None:
            return agent.host, f"exited {agent.proc.poll()}: {agent.proc.read_stderr()[-500:].strip()}"
        return agent.host, None

    def stop(self) -> None:
        """Stop every Telegraf (SIGTERM: it stops the probe and flushes), then bring remote hosts'
        files home. Safe to call any number of times."""
        if self._stopped:
            return
        self._stopped = True
        agents = list(self.agents.values())
        with ThreadPoolExecutor(max_workers=min(16, len(agents) or 1)) as pool:
            list(pool.map(self._stop_one, agents))

    def _stop_one(self, agent: _Agent) -> None:
        if agent.proc is not None:
            code = agent.proc.stop(term_timeout=STOP_TIMEOUT_S)
            if code not in (0, None, -15, 143) and agent.host not in self.problems:
                log.warning("telegraf on %s exited %s: %s", agent.host, code, agent.proc.read_stderr()[-300:])
        if agent.remote_dir is not None:
            try:
                self._fetch(agent)
            finally:
                try:
                    agent.executor.run(["rm", "-rf", agent.remote_dir], check=False)
                except CommandError as exc:
                    log.warning("could not remove %s on %s: %s", agent.remote_dir, agent.host, exc)

    def _fetch(self, agent: _Agent) -> None:
        """Append the remote file to the local one, streamed (cat's stdout into a file)."""
        part = self.work_dir / f"telegraf-{agent.host}.fetch"      # never in the shipper's glob
        try:
            cat = agent.executor.start(["cat", agent.output], label=f"telegraf-fetch-{agent.host}", stdout=part)
            try:
                code = cat.wait(timeout=FETCH_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                code = cat.stop()
            if code != 0:
                log.warning("telegraf on %s: could not read %s (cat exited %s)", agent.host, agent.output, code)
                return
            with open(part, "rb") as src, open(agent.local_output, "ab") as dst:
                shutil.copyfileobj(src, dst)
        except (CommandError, OSError) as exc:
            log.warning("telegraf on %s: could not fetch %s: %s", agent.host, agent.output, exc)
        finally:
            part.unlink(missing_ok=True)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0

