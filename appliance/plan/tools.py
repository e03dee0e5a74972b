"""What a replay's transfers are made of: GridFTP, the paper's own tool, where the lab's hosts have
it, iperf3 otherwise ([replay] tool = "auto"; or either by name). A registry of name -> tool
behind one small contract; leg.py and replay.py never test a tool's name.

Each transfer PUTs (or sends) its bytes from S1 to a server of its class's pool on D1, paced at
its requested rate:
- iperf3: `-n BYTES --fq-rate RATE`; a server runs one test at a time and turns a second client
  away as busy (the agent tries another server). The client's JSON says what arrived.
- GridFTP: globus-url-copy from /dev/zero (`-len BYTES`, one stream, MODE E) to an anonymous
  globus-gridftp-server, whose passive data port is pinned to the pool's port (the port the class
  shaper classifies by, drivers/gridftp.py; listened on with SO_REUSEADDR, as the server closes
  first and TIME_WAIT would hold the port a minute) and whose control channel listens
  CONTROL_PORT_OFFSET above it, the port the client names. globus-url-copy has no rate or CCA option: the LD_PRELOAD
  shim (drivers/ccashim.py) sets both on its sockets. The server's transfer-stats lines say what
  arrived, one line a transfer, in the order its port served them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from longhaul.collectors.studies.planning.settings import REPLAY_TOOL_NAMES
from longhaul.drivers import ccashim, gridftp, iperf3
from longhaul.drivers.agents.replay_leg import PORT
from longhaul.drivers.tool import BurstSpec

AUTO = "auto"
GRIDFTP_STREAMS = 1          # one stream: the pacing cap is the transfer's rate


@dataclass(frozen=True)
class ClientSide:
    """What the replay's client needs of the lab."""

    receiver_address: str
    cca: str
    pacing_overhead: float


class Iperf3Replay:
    name = "iperf3"
    sender_executables = ("iperf3",)
    receiver_executables = ("iperf3",)
    busy_marker = "busy"         # iperf3's own word for a server still busy with the previous client

    def sender_files(self) -> tuple[str, ...]:
        return ()

    def receiver_files(self) -> tuple[str, ...]:
        return ()

    def receiver_checks(self, receiver_address: str) -> list[tuple[list[str], str]]:
        """(argv that must succeed on D1, what it means when it does not)."""
        return []

    def pool_port(self, data_port: int) -> int:
        return data_port

    def server(self, data_port: int, receiver_address: str, workdir: str) -> list[str]:
        return iperf3.server_argv(data_port)

    def client(self, side: ClientSide, nbytes: int, rate_bps: float) -> list[str]:
        # the pool's port is the agent's to fill in (PORT), per transfer
        return iperf3.client_argv(side.receiver_address, PORT, bytes_=int(nbytes), cca=side.cca,
                                  pacing_bps=rate_bps * side.pacing_overhead)

    def client_result(self, stdout: str) -> tuple[float | None, str | None]:
        """(bytes received, error) from the client's output."""
        try:
            result = iperf3.parse(stdout)
        except ValueError as exc:
            return None, f"no iperf3 result ({exc})"
        return float(result.bytes_received), result.error

    def server_received(self, log_text: str) -> list[tuple[int, int | None]]:
        return []


class GridFTPReplay:
    name = "gridftp"
    sender_executables = ("globus-url-copy",)
    receiver_executables = ("globus-gridftp-server",)
    busy_marker = None

    def sender_files(self) -> tuple[str, ...]:
        return (str(ccashim.library_path()),)

    def receiver_files(self) -> tuple[str, ...]:
        return (str(ccashim.library_path()),)

    def receiver_checks(self, receiver_address: str) -> list[tuple[list[str], str]]:
        # the server turns its address into a name at start and cannot start where that fails
        # (a VM with no resolver: "Temporary failure in name resolution"); the lab's hosts file
        # names it in the netns lab
        return [(["getent", "hosts", receiver_address],
                 f"{receiver_address} has no name there (globus-gridftp-server needs it in /etc/hosts or DNS)")]

    def _spec(self, data_port: int, receiver_address: str, workdir: str) -> BurstSpec:
        return BurstSpec(receiver=receiver_address, port=data_port, duration_s=None, bytes=None,
                         streams=GRIDFTP_STREAMS, workdir=PurePosixPath(workdir))

    def pool_port(self, data_port: int) -> int:
        return data_port + gridftp.CONTROL_PORT_OFFSET

    def server(self, data_port: int, receiver_address: str, workdir: str) -> list[str]:
        # SO_REUSEADDR: the pinned data port is listened on again within TIME_WAIT's 60 s
        return ccashim.wrap(gridftp.server_argv(self._spec(data_port, receiver_address, workdir)), None,
                            reuse_address=True)

    def client(self, side: ClientSide, nbytes: int, rate_bps: float) -> list[str]:
        return ccashim.wrap(gridftp.memory_put_argv(side.receiver_address, PORT, int(nbytes), GRIDFTP_STREAMS),
                            side.cca, max_pacing_bps=rate_bps * side.pacing_overhead)

    def client_result(self, stdout: str) -> tuple[float | None, str | None]:
        return None, None        # the server's log says what arrived (server_received)

    def server_received(self, log_text: str) -> list[tuple[int, int | None]]:
        """(bytes, code) of each transfer the server's log records, in the order it served them."""
        return [(rec["bytes"], rec["code"]) for rec in gridftp.parse_transfer_stats(log_text)]


REPLAY_TOOLS = {tool.name: tool for tool in (GridFTPReplay(), Iperf3Replay())}
PREFERENCE = ("gridftp", "iperf3")         # "auto": the first the lab's hosts have
if (AUTO, *REPLAY_TOOLS) != REPLAY_TOOL_NAMES:  # plan.toml's allowed values are these names
    raise ImportError(f"plan.toml's replay tools {REPLAY_TOOL_NAMES} and the registry {tuple(REPLAY_TOOLS)} differ")
