"""What a stream point runs, pure (tested without Docker): the sender processes of every
sender, spread over the receivers' iperf servers (iperf 2) or each on its own port (iperf3), their
command lines, and what the containers' limits and memory must hold for the largest point."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tierbench.config.errors import ConfigError
from tierbench.kinds.net import tools
from tierbench.kinds.net.settings import Net, total_connections, window_for

# iperf 2 servers per receiver (NET_IPERF_SERVERS in compose/net.yml): at least 4, and enough
# that none serves more than PER_SERVER connections: an iperf 2.1.8 server accepting 375 at once
# was seen to crash here (malloc: corrupted list) and take its receiver down with it
PORTS_PER_RECEIVER = 4
# Receivers that share one host's ports (a cluster node, host networking): receiver i listens on
# every port of the single-host layout plus (i - 1) x PORT_STRIDE.
PORT_STRIDE = 1000
PER_SERVER = 100
# connections per iperf3 process (3.12 refuses more than 128): 6000 are 48 processes
IPERF3_STREAMS = 125
FD_MARGIN = 32  # descriptors a tool process holds besides its connections
NOFILE_DEFAULT = 16384  # compose/net.yml's NET_NOFILE
PORT_RANGE_DEFAULT = "10000 65535"  # compose/net.yml's NET_PORT_RANGE


@dataclass(frozen=True)
class Flow:
    """One sender process: which sender (0-based), to which receiver address and port, with
    how many connections."""

    client: int
    address: str
    port: int
    streams: int


def iperf3_processes(connections: int, receivers: int) -> int:
    """iperf3 processes one sender runs: at least one per receiver it uses, at most
    IPERF3_STREAMS connections each."""
    return max(min(receivers, connections), -(-connections // IPERF3_STREAMS))


def largest(n: Net, receivers: int) -> int:
    """The most connections one sender opens in any point with this many receivers."""
    return max(total_connections(n, c, receivers) for c in n.connections)


def iperf_servers(n: Net, receivers: int, clients: int = 1) -> int:
    """iperf 2 servers each receiver runs for the experiment's largest point."""
    most = largest(n, receivers) * clients if n.test == "stream" and n.tool == "iperf2" else 1
    return max(PORTS_PER_RECEIVER, -(-most // (receivers * PER_SERVER)))


def iperf3_block(n: Net, receivers: int) -> int:
    """Server ports per receiver that one sender's iperf3 processes use at most."""
    if n.test != "stream" or n.tool != "iperf3":
        return 1
    return -(-iperf3_processes(largest(n, receivers), receivers) // receivers)


def iperf3_servers(n: Net, receivers: int, clients: int = 1) -> int:
    """iperf3 servers each receiver runs: a block of ports for every sender (an iperf3 server
    runs one test at a time)."""
    return max(PORTS_PER_RECEIVER, clients * iperf3_block(n, receivers))


def slots(addresses: list[str], ports_each: int, connections: int,
          shift: list[int] | None = None) -> list[tuple[str, int, int]]:
    """(receiver address, iperf port, connections) per sender process: the connections spread
    evenly over every receiver's iperf servers, the busiest getting at most one more. ``shift``:
    each receiver's ports moved by this much (receivers sharing a node's ports)."""
    shift = shift or [0] * len(addresses)
    ports = [(a, tools.IPERF_PORT + d + k) for k in range(ports_each)
             for a, d in zip(addresses, shift)]
    ports = ports[: max(1, min(len(ports), connections))]
    base, extra = divmod(connections, len(ports))
    return [(a, p, base + (1 if i < extra else 0)) for i, (a, p) in enumerate(ports)
            if base + (1 if i < extra else 0) > 0]


def flows(n: Net, addresses: list[str], connections: int, clients: int,
          iperf2_ports: int = PORTS_PER_RECEIVER, shift: list[int] | None = None) -> list[Flow]:
    """Every sender process of a stream point, for every sender. iperf 2: the connections over
    the receivers' iperf servers (all senders use the same ports: an iperf 2 server takes many
    clients). iperf3: processes round-robin over the receivers, each on a port of its sender's
    own block."""
    out = []
    for c in range(clients):
        if n.tool == "iperf2":
            out += [Flow(c, a, p, k) for a, p, k in slots(addresses, iperf2_ports, connections,
                                                          shift)]
            continue
        r = len(addresses)
        procs = iperf3_processes(connections, r)
        base, extra = divmod(connections, procs)
        block = iperf3_block(n, r)
        moved = shift or [0] * r
        out += [Flow(c, addresses[i % r], tools.IPERF3_PORT + moved[i % r] + c * block + i // r,
                     base + (1 if i < extra else 0)) for i in range(procs)]
    return out


def commands(n: Net, flow_list: list[Flow], write_size: int, direction: str,
             window: int | None) -> list[list[str]]:
    """The tool's command line of each flow."""
    build = tools.iperf2_command if n.tool == "iperf2" else tools.iperf3_command
    return [build(f.address, port=f.port, streams=f.streams, interval_s=1,
                  duration_s=n.measure_s, warmup_s=n.warmup_s, write_size=write_size,
                  window=window, direction=direction) for f in flow_list]


def limit_problems(n: Net, receivers: int, clients: int, nofile: int, port_range: tuple[int, int],
                   daemon_nofile: int | None) -> list[str]:
    """What the containers' limits cannot hold for this experiment, one sentence each: the
    descriptors of the busiest tool process (NET_NOFILE, at most the Docker daemon's own hard
    limit) and a sender's connections against its ephemeral ports (NET_PORT_RANGE)."""
    out = []
    if daemon_nofile is not None and nofile > daemon_nofile:
        out.append(f"NET_NOFILE={nofile} is above the Docker daemon's own open-file limit "
                   f"({daemon_nofile}), which containers cannot exceed: set NET_NOFILE to at "
                   f"most {daemon_nofile} in .env")
    if n.test != "stream":
        return out
    most = largest(n, receivers)
    per_process = max(f.streams for f in flows(n, ["r"] * receivers, most, 1,
                                               iperf_servers(n, receivers, clients)))
    server_side = IPERF3_STREAMS if n.tool == "iperf3" else PER_SERVER
    busiest = max(per_process, min(server_side, most))
    if busiest + FD_MARGIN > nofile:
        out.append(f"a {n.tool} process would hold {busiest} connections, which with "
                   f"{FD_MARGIN} more descriptors is above NET_NOFILE={nofile}: raise "
                   f"NET_NOFILE in .env to at least {busiest + FD_MARGIN}")
    ports = port_range[1] - port_range[0] + 1
    if most > ports:
        out.append(f"one sender would open {most} connections but has {ports} ephemeral ports "
                   f"(NET_PORT_RANGE={port_range[0]} {port_range[1]}): widen NET_PORT_RANGE in "
                   ".env or lower net.connections")
    return out


def buffer_bytes(n: Net, receivers: int, clients: int) -> int:
    """Socket-buffer memory the largest point may take: every connection's send and receive
    buffers (the kernel doubles the size asked for; autotuned sockets counted at 256 KiB)."""
    if n.test != "stream":
        return 0
    most = largest(n, receivers)
    window = window_for(n, most) or 256 * 1024
    return most * clients * 2 * 2 * window


def parse_range(text: str) -> tuple[int, int]:
    """NET_PORT_RANGE ('10000 65535') as two numbers."""
    parts = str(text).split()
    if len(parts) != 2 or not all(p.isdigit() for p in parts) or int(parts[0]) > int(parts[1]):
        raise ConfigError(f"NET_PORT_RANGE={text!r} is not two port numbers such as "
                          f"'{PORT_RANGE_DEFAULT}'")
    return int(parts[0]), int(parts[1])


def daemon_nofile() -> int | None:
    """The Docker daemon's hard open-file limit, when dockerd runs on this host."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "comm").read_text().strip() != "dockerd":
                continue
            for line in (proc / "limits").read_text().splitlines():
                if line.startswith("Max open files"):
                    hard = line.split()[4]
                    return None if hard == "unlimited" else int(hard)
        except OSError:
            continue
    return None
