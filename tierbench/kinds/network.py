"""The network micro-benchmark kind (000 §4, 001, 003 §5, 004 §6.1): TCP between sender
containers (`net-client`) and receiver containers (`net-server`, compose/net.yml) on their own
network, through the same runner and modes as every kind.

Two tests:
- `stream`: bulk TCP. With iperf 2 (`tool: iperf2`, a thread per connection, CSV interval
  reports) the connections are spread evenly over the receivers and their iperf servers (4
  ports each), one sender process per server port. With iperf3 (`tool: iperf3`, one thread per
  process, at most 125 connections each) every process gets its own server port: this is how
  thousands of connections fit on a small host (001's 6000). Every sender runs the same set of
  connections (`clients`: 003's concurrent client hosts); all processes of all senders start at
  the same instant. Write size, direction (one way, or both ways on the same sockets) and
  socket buffer (001's window rule: one size up to N connections, another above) as factors.
  The warm-up is dropped from the tools' reports; the established connections are counted in
  every sender's namespace while the run is under way; the senders' TCP counters give the data
  segments per ACK; with `profile: true`, perf samples the senders' CPUs (NET-txprofile; on a
  cluster on the net_client node, over SSH).
- `latency`: request/response with sockperf ping-pong (one message in flight per session,
  percentiles of half the round trip, as 004 Fig. 14 reports one-way latency): from every
  sender one session to the first receiver, or with `per_receiver` one to each receiver (003's
  profile: every client keeps a session to each of 4 servers), all at once.

`cases` layers every mode over each of a list of modes (000 §4.3's cumulative socket-option
cases): the report then compares the modes within each case.

CPU is measured by tierbench, per side (the containers' cgroups) and for the host, over the
samples that bracket the measured window, never from the tools' own figures (which count only
their process). The receivers' CPU is `cpu_s_servers`; costs are CPU µs per KB moved
(netperf's service demand); the report adds cycles per KB from the host's clock (an estimate).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import model_validator

from tierbench.config.errors import ConfigError
from tierbench.config.models import (
    Model,
    choice,
    flag,
    non_empty_list,
    one_or_many,
    problem,
    text,
    whole,
)
from tierbench.kinds import families, net
from tierbench.kinds.contract import (
    CLIENT,
    SERVER,
    Column,
    Deployment,
    Experiment,
    Kind,
    Point,
    PointContext,
    PointResult,
    RunEnds,
    Tier,
    log,
    refuse_server_modes,
)
from tierbench.measure import counters
from tierbench.measure.counters import MeasureError
from tierbench.measure.sampler import CgroupCpu, CgroupGroup
from tierbench.modes.model import Mode, load_layered, load_mode
from tierbench.placement import compose as stack
from tierbench.placement import nodes, placer, space

SENDER, RECEIVER = "net-client", "net-server"
TIERS = (SENDER, RECEIVER)
TESTS = ("stream", "latency", "dmacopy")
TOOLS = ("iperf2", "iperf3")
# iperf 2 servers per receiver (NET_IPERF_SERVERS in compose/net.yml): at least 4, and enough
# that none serves more than PER_SERVER connections: an iperf 2.1.8 server accepting 375 at once
# was seen to crash here (malloc: corrupted list) and take its receiver down with it
PORTS_PER_RECEIVER = 4
# Receivers that share one host's ports (a cluster node, host networking): receiver i listens on
# every port of the single-host layout plus (i - 1) x PORT_STRIDE.
PORT_STRIDE = 1000
PER_SERVER = 100
# iperf 2 runs a thread per connection: above this many in one point, on 2 cores, iperf 2.1.8
# servers and clients were seen to abort (double free, corrupted lists) and reset connections
IPERF2_MAX_CONNECTIONS = 1000
# connections per iperf3 process (3.12 refuses more than 128): 6000 are 48 processes
IPERF3_STREAMS = 125
IMAGE = "tierbench-net"
MAX_CONNECTIONS = 6000
MAX_CLIENTS = 8
START_DELAY_S = 1.0  # every sender process starts this far ahead, at the same instant
FD_MARGIN = 32  # descriptors a tool process holds besides its connections
NOFILE_DEFAULT = 16384  # compose/net.yml's NET_NOFILE
PORT_RANGE_DEFAULT = "10000 65535"  # compose/net.yml's NET_PORT_RANGE
PROFILE_HZ = 999


class WindowAbove(Model):
    """001's window rule: above `connections` connections, every socket gets `window` bytes."""

    connections: whole(1, MAX_CONNECTIONS)
    window: whole(4096)


class Net(Model):
    """The `net:` block of a network experiment."""

    test: choice(*TESTS)
    tool: choice(*TOOLS) = "iperf2"
    # receivers (000's links: one receiver per port of the sender); a list is a factor
    receivers: one_or_many(whole(1, 15), "whole number") = [1]
    # senders (003's concurrent client hosts), each running the whole set of connections
    clients: one_or_many(whole(1, MAX_CLIENTS), "whole number") = [1]
    connections: one_or_many(whole(1, MAX_CONNECTIONS), "whole number") = [1]
    # connections (stream) or sessions (latency) per receiver (000 NET-bw: one connection per
    # link and direction; 003: one session from every client to each server)
    per_receiver: flag() = False
    write_size: one_or_many(whole(1, 16 * 1024 * 1024), "whole number") = [131072]
    direction: one_or_many(choice("uni", "bi"), "direction") = ["uni"]
    window: whole(4096) | None = None
    window_above: WindowAbove | None = None
    # latency: bytes per message; dmacopy: bytes per copy
    message_size: one_or_many(whole(net.SOCKPERF_MIN_MESSAGE, 65536), "whole number") = [64]
    cases: non_empty_list(text(r"^[\w./-]+$", "sockopt-1-default"), "mode names") | None = None
    profile: flag() = False
    warmup_s: whole(0, 60) = 2
    measure_s: whole(1, 600) = 10

    @model_validator(mode="after")
    def _fits(self) -> Net:
        if self.test == "stream" and self.tool == "iperf2":
            most = max(total_connections(self, c, r) for c in self.connections
                       for r in self.receivers) * max(self.clients)
            if most > IPERF2_MAX_CONNECTIONS:
                raise problem("{most} connections at once are more than iperf 2 holds here "
                              "({limit}: a thread each, and iperf 2.1.8 was seen to crash "
                              "above that on 2 cores); set tool: iperf3",
                              sub="connections", most=most, limit=IPERF2_MAX_CONNECTIONS)
        if self.profile and self.test != "stream":
            raise problem("profiles the senders of a stream test; set test: stream",
                          sub="profile")
        if self.cases is not None and len(set(self.cases)) != len(self.cases):
            raise problem("lists a mode twice", sub="cases")
        return self


class NetSettings(Model):
    """The keys of a network experiment besides the common ones."""

    net: Net


# ---------------------------------------------------------------------------------------------
# What a point runs (pure: tested without Docker)


@dataclass(frozen=True)
class Flow:
    """One sender process: which sender (0-based), to which receiver address and port, with
    how many connections."""

    client: int
    address: str
    port: int
    streams: int


def total_connections(n: Net, connections: int, receivers: int) -> int:
    """The connections of a point from one sender (per receiver when the experiment says so)."""
    return connections * receivers if n.per_receiver else connections


def window_for(n: Net, connections: int) -> int | None:
    """The socket buffer of a point's connections (None: the kernel's autotuning)."""
    if n.window_above is not None and connections > n.window_above.connections:
        return n.window_above.window
    return n.window


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
    ports = [(a, net.IPERF_PORT + d + k) for k in range(ports_each)
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
        out += [Flow(c, addresses[i % r], net.IPERF3_PORT + moved[i % r] + c * block + i // r,
                     base + (1 if i < extra else 0)) for i in range(procs)]
    return out


def commands(n: Net, flow_list: list[Flow], write_size: int, direction: str,
             window: int | None) -> list[list[str]]:
    """The tool's command line of each flow."""
    build = net.iperf2_command if n.tool == "iperf2" else net.iperf3_command
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


class NetKind(Kind):
    """TCP micro-benchmarks between containers: bulk throughput and request/response latency."""

    name = "net"
    description = ("network micro-benchmarks: bulk TCP (iperf 2 or iperf3) and latency "
                   "(sockperf)")
    model = NetSettings
    scalable = {"net.measure_s": 2, "net.warmup_s": 1}
    block = "net"
    tiers = TIERS
    roles = ("net_client", "net_server")
    bring_up = "the network tier's bring-up (seconds)"
    variation_pct = 5.0

    def check(self, exp: Experiment) -> None:
        """No web or proxy servers here for a mode's server options; the cases load."""
        refuse_server_modes(exp, "a network experiment")
        try:
            self.modes(exp)
        except ConfigError as exc:
            raise ConfigError(f"{exp.source}: net.cases: {exc}") from None

    def settings(self, exp: Experiment) -> Net:
        return exp.settings.net  # type: ignore[attr-defined, no-any-return]

    def modes(self, exp: Experiment) -> list[Mode]:
        """The experiment's modes, each layered over every case when there are cases."""
        cases = self.settings(exp).cases
        if not cases:
            return exp.modes
        return [load_layered([case, m.source]) for case in cases for m in exp.modes]

    def point_mode(self, exp: Experiment, point: Point) -> Mode:
        """The point's mode, layered over its case when there are cases."""
        mode = exp.mode(point.mode)
        if "case" not in point.factors:
            return mode
        return load_layered([point.factors["case"], mode.source])

    def resolved(self, exp: Experiment) -> dict[str, Any]:
        """The resolved experiment (manifest and experiment.yml)."""
        n = self.settings(exp)
        block: dict[str, Any] = {"test": n.test, "receivers": list(n.receivers),
                                 "clients": list(n.clients), "per_receiver": n.per_receiver,
                                 "warmup_s": n.warmup_s, "measure_s": n.measure_s}
        if n.test == "stream":
            block.update(tool=n.tool, connections=list(n.connections),
                         write_size=list(n.write_size), direction=list(n.direction),
                         window=n.window,
                         window_above=n.window_above.model_dump() if n.window_above else None,
                         profile=n.profile)
        else:
            block.update(message_size=list(n.message_size))
        if n.cases:
            block["cases"] = list(n.cases)
            block["case_modes"] = [load_mode(c).as_dict() for c in n.cases]
        return {"name": exp.name, "kind": self.name, "description": exp.description,
                "source": exp.source, "seed": exp.seed, "repetitions": exp.repetitions,
                "settle_s": exp.settle_s, "modes": [m.as_dict() for m in exp.modes],
                "net": block}

    def axes(self, exp: Experiment) -> list[tuple[str, list[Any]]]:
        """receivers x clients x (stream: write size x direction x connections; latency:
        message size) x case x mode x repetition."""
        n = self.settings(exp)
        factors: list[tuple[str, list[Any]]] = [("receivers", list(n.receivers)),
                                                ("clients", list(n.clients))]
        if n.test == "stream":
            factors += [("write_size", list(n.write_size)), ("direction", list(n.direction)),
                        ("connections", list(n.connections))]
        else:
            factors += [("message_size", list(n.message_size))]
        if n.cases:
            factors += [("case", list(n.cases))]
        return factors + [("mode", [m.name for m in exp.modes]),
                          ("repetition", list(range(1, exp.repetitions + 1)))]

    def placement(self, exp: Experiment, combo: dict[str, Any] | Point) -> Hashable:
        """The numbers of receivers and senders: each pair is one deployment."""
        return (combo["receivers"], combo["clients"])

    def order(self, exp: Experiment, combos: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Shuffled within each deployment, deployments in the order listed."""
        n = self.settings(exp)
        rx, cl = list(n.receivers), list(n.clients)
        return sorted(combos, key=lambda c: (rx.index(c["receivers"]), cl.index(c["clients"])))

    # -- plan
    def point_seconds(self, exp: Experiment) -> float:
        """settle + common start + warm-up + measured + start, stop and counting."""
        n = self.settings(exp)
        return exp.settle_s + start_delay() + n.warmup_s + n.measure_s + 4

    def plan_header(self, exp: Experiment, points: list[Point]) -> list[str]:
        """The test, the tool and the time per point."""
        n = self.settings(exp)
        tool = ({"iperf2": "iperf 2", "iperf3": f"iperf3, {IPERF3_STREAMS} connections per "
                 "process"}[n.tool] if n.test == "stream" else "sockperf ping-pong"
                if n.test == "latency" else "a DMA copy engine against memcpy")
        if n.test == "dmacopy":
            return [f"experiment {exp.name} ({exp.source}): {len(points)} points, order "
                    f"shuffled with seed {exp.seed}; test dmacopy ({tool})",
                    "  runs only where the host has a DMA copy engine (an ioatdma or idxd "
                    "channel in /sys/class/dma); elsewhere the run is refused before it starts"]
        senders = "/".join(map(str, n.clients))
        head = [f"experiment {exp.name} ({exp.source}): {len(points)} points, order shuffled "
                f"with seed {exp.seed}; test {n.test} ({tool}), {senders} "
                f"sender{'s' if max(n.clients) > 1 else ''}, "
                f"{'/'.join(map(str, n.receivers))} receiver(s)",
                f"per point: settle {exp.settle_s:g} s + common start {start_delay():g} s + "
                f"warm-up {n.warmup_s} s + measured {n.measure_s} s + about 4 s to start and "
                "stop the tools"
                + ("; connections per receiver" if n.per_receiver and n.test == "stream"
                   else "")
                + ("; a session to each receiver" if n.per_receiver and n.test == "latency"
                   else "")]
        if n.test == "stream" and (n.window or n.window_above):
            rule = f"socket buffers {n.window or 'autotuned'}"
            if n.window_above:
                rule += (f", {n.window_above.window} above {n.window_above.connections} "
                         "connections")
            head.append(f"  {rule}")
        if n.cases:
            head.append(f"  every mode over each case: {', '.join(n.cases)}")
        if n.profile:
            head.append(f"  perf samples the senders' CPUs at {PROFILE_HZ} Hz (cpu-clock, call "
                        "graphs) over the measured window")
        split = [m.name for m in exp.modes if "tcp-data-split" in m.knobs.rings]
        if split:
            head.append(f"  modes {', '.join(split)} set header-data split (ethtool -G "
                        "tcp-data-split), which veth lacks: on one host the run is refused "
                        "before its first point; run it with --cluster on NICs that have it "
                        "(000's DMA copy engine has no mode at all: Linux dropped NET_DMA in 3.19)")
        return head

    def placement_line(self, exp: Experiment, point: Point, first: bool) -> str:
        """The network tier."""
        if self.settings(exp).test == "dmacopy":
            return "  -- no containers: the host's DMA copy engine and CPU"
        c = point["clients"]
        return (f"  -- network tier: {c} sender{'s' if c > 1 else ''} ({SENDER}), "
                f"{point['receivers']} receiver(s) ({RECEIVER}) on 198.18.4.0/24")

    def point_line(self, exp: Experiment, point: Point) -> str:
        """Factors, mode and repetition."""
        return (f"  {point.id}  {self.what(exp, point):<34} mode={point.mode:<16} "
                f"rep={point.repetition}  ~{self.point_seconds(exp):.0f} s")

    def what(self, exp: Experiment, point: Point) -> str:
        f = point.factors
        n = self.settings(exp)
        head = f"rx={f['receivers']}" + (f" clients={f['clients']}" if n.clients != [1] else "")
        if "case" in f:
            head += f" case={f['case']}"
        if n.test == "dmacopy":
            return f"copy={f['message_size']} B"
        if "connections" in f:
            return (f"{head} conns={f['connections']} write={f['write_size']} "
                    f"dir={f['direction']}")
        return f"{head} message={f['message_size']} B"

    def point_title(self, exp: Experiment, point: Point) -> str:
        """How the progress line names a point."""
        return f"{point.id} {self.what(exp, point)} {point.mode} rep {point.repetition}"

    # -- run
    def needs(self, exp: Experiment, points: list[Point]) -> list[space.Need]:
        """Socket buffers of the largest point, against free memory."""
        n = self.settings(exp)
        most = max(((r, c) for r in n.receivers for c in n.clients),
                   key=lambda rc: buffer_bytes(n, *rc))
        nbytes = buffer_bytes(n, *most)
        if not nbytes:
            return []
        return [space.Need(f"socket buffers of {largest(n, most[0]) * most[1]} connections",
                           nbytes, "memory (socket buffers)", space.memory_room(),
                           "lower net.connections or net.window")]

    def preflight(self, exp: Experiment, points: list[Point]) -> None:
        """The image; the containers' limits hold the largest point; perf, for a profile; a DMA
        copy engine, for dmacopy."""
        n = self.settings(exp)
        if n.test == "dmacopy":
            dmacopy_check(exp.source)
        conf = space.settings()
        try:
            nofile = int(conf.get("NET_NOFILE") or NOFILE_DEFAULT)
        except ValueError:
            raise ConfigError(f"NET_NOFILE={conf.get('NET_NOFILE')!r} is not a whole number"
                              ) from None
        ports = parse_range(conf.get("NET_PORT_RANGE") or PORT_RANGE_DEFAULT)
        limit = daemon_nofile()
        for r in n.receivers:
            for c in n.clients:
                found = limit_problems(n, r, c, nofile, ports, limit)
                if found:
                    raise ConfigError(f"{exp.source}: {found[0]}; nothing was run")
        stack.require_image(IMAGE)
        if n.profile and (placer.current().cluster is None or sender_node() is not None):
            perf_check(exp.source, sender_node())

    def deploy(self, exp: Experiment, key: Hashable, prepared: Any,
               previous: Deployment | None, point: Point) -> Deployment:
        """compose/net.yml up: the senders and the receivers (the web stack goes first)."""
        receivers, clients = key  # type: ignore[misc]
        n = self.settings(exp)
        ports = iperf_servers(n, receivers, clients)
        ports3 = iperf3_servers(n, receivers, clients)
        where = placer.current()
        log(f"tierbench: bringing the network tier up on {where.name} ({clients} sender(s), "
            f"{receivers} receiver(s), {ports} iperf and {ports3} iperf3 servers each)")
        if where.shares_ports() and receivers > 1 and \
                max(ports + net.IPERF3_PORT - net.IPERF_PORT, ports3) > PORT_STRIDE - 200:
            raise stack.StackError(f"{receivers} receivers on one node's ports need at most "
                                   f"{PORT_STRIDE - 200} iperf3 servers each, this point "
                                   f"{ports3}: use one receiver per node")
        where.down()
        env = {**stack.dotenv(), **os.environ, "NET_IPERF_SERVERS": str(ports),
               "NET_IPERF3_SERVERS": str(ports3), "NET_SOCKPERF_SERVERS": str(clients)}
        where.up(stack.Services(net_files(), env, services=[RECEIVER, SENDER],
                                scale={RECEIVER: receivers, SENDER: clients},
                                replica_env={RECEIVER: receiver_env(receivers, ports, ports3,
                                                                     clients)},
                                timeout=300))
        deployment = discover(receivers, clients)
        deployment.info["ports"] = ports
        return deployment

    def finish(self, exp: Experiment, deployment: Deployment) -> list[str]:
        """The receivers stopped: iperf, iperf3 and sockperf servers admit whoever connects, so
        they listen only during the run (the next one brings the tier up anew)."""
        where = placer.current()
        stopped = [c for c in where.replicas() if c.service == RECEIVER]
        for c in stopped:
            where.stop(c)
        return [f"stopped the {len(stopped)} receiver(s) (iperf, iperf3 and sockperf servers "
                "admit whoever connects)"] if stopped else []

    def running(self) -> Deployment | None:
        """The network tier, when it is up."""
        found = [c for c in placer.current().replicas() if c.service in TIERS]
        receivers = sum(1 for c in found if c.service == RECEIVER)
        clients = sum(1 for c in found if c.service == SENDER)
        return discover(receivers, clients) if receivers and clients else None

    def provenance(self, exp: Experiment, deployment: Deployment) -> dict[str, Any]:
        """The tools' versions as the sender's image reports them."""
        sender = deployment.info["senders"][0]
        out = {}
        for tool, argv in (("iperf", ["iperf", "-v"]), ("iperf3", ["iperf3", "--version"]),
                           ("sockperf", ["sockperf", "--version"])):
            done = stack.exec_in(sender, argv, timeout=30)
            lines = (done.stdout + done.stderr).strip().splitlines()
            out[tool] = lines[0] if lines else "unknown"
        if self.settings(exp).profile:
            node = sender_node() if sender.node else None
            done = (subprocess.run(["perf", "--version"], capture_output=True, text=True,
                                   timeout=30, check=False) if node is None else
                    nodes.run_on_node(node, "perf --version", timeout=30, check=False))
            out["perf"] = done.stdout.strip() or "unknown"
        return {"tools": out}

    def run_point(self, ctx: PointContext) -> PointResult:
        """Run the tool(s), then the figures over the samples bracketing the measured window."""
        n = self.settings(ctx.exp)
        started = time.time() + start_delay()
        try:
            if n.test == "stream":
                values = self.stream(ctx, n, started)
            else:
                values = self.latency(ctx, n, started)
        except subprocess.TimeoutExpired as exc:
            ctx.sampler.stop()
            return PointResult(error=f"{n.tool if n.test == 'stream' else 'sockperf'} did not "
                               f"finish within {exc.timeout:.0f} s and was stopped (the host "
                               "may be overloaded by this many connections)")
        except (net.NetParseError, ValueError) as exc:
            ctx.sampler.stop()
            return PointResult(error=f"{exc}")
        samples = ctx.sampler.stop()
        start = started + n.warmup_s
        end = start + n.measure_s
        try:
            first, last = counters.window(samples, start, end)
        except MeasureError as exc:
            return PointResult(error=str(exc))
        values.update(cpu_figures(first, last, values.pop("bytes_per_s")))
        ctx.record["window"] = {"load_started": started, "measure_start": start,
                                "measure_end": end, "start": first["t"], "end": last["t"]}
        return PointResult(values, None, (start, end))

    def stream(self, ctx: PointContext, n: Net, started: float) -> dict[str, Any]:
        """The tool from every sender to the receivers' ports, all processes at once;
        connections counted, TCP counters read, the senders' CPUs profiled when asked."""
        f = ctx.point.factors
        senders = ctx.deployment.info["senders"]
        conns = total_connections(n, f["connections"], f["receivers"])
        window = window_for(n, conns)
        plan = flows(n, ctx.deployment.info["addresses"], conns, f["clients"],
                     ctx.deployment.info.get("ports", PORTS_PER_RECEIVER),
                     ctx.deployment.info.get("shift"))
        ports = {flow.port for flow in plan}
        argvs = commands(n, plan, f["write_size"], f["direction"], window)
        tagged = list(zip(range(1, len(plan) + 1), plan, argvs))
        procs, outs = [], []
        stop = ["pkill", "-KILL", "-f", "iperf -c" if n.tool == "iperf2" else "iperf3 -c"]
        measure_end = started + n.warmup_s + n.measure_s
        try:
            for c, sender in enumerate(senders):
                # every process of every sender starts at the same instant from one shell per
                # sender (one `docker exec` per process would start them seconds apart on a
                # loaded host); each output line is tagged with its process number
                script = net.start_at(started) + "; " + " ".join(
                    f"({shlex.join(argv)} 2>&1 | sed -u 's/^/{k} /') &"
                    for k, flow, argv in tagged if flow.client == c) + " wait"
                out = (ctx.dir / f"{n.tool}-sender{c + 1}.txt").open("w")
                outs.append(out)
                procs.append(subprocess.Popen([*stack.docker_cmd(sender), "exec", sender.id,
                                               "sh", "-c", script],
                                              stdout=out, stderr=subprocess.STDOUT))
            pause_until(started + n.warmup_s)
            ctx.sampler.mark()
            tcp0 = [tcp_counters(s, ctx.dir / f"snmp-start-{i + 1}.txt")
                    for i, s in enumerate(senders)]
            at_start = sum(established_now(s, ctx.dir / f"established-start-{i + 1}.txt", ports)
                           for i, s in enumerate(senders))
            profiler = start_profile(ctx, senders, n.measure_s) if n.profile else None
            pause_until(started + n.warmup_s + n.measure_s / 2)
            ctx.sampler.mark()
            established = sum(established_now(s, ctx.dir / f"established-{i + 1}.txt", ports)
                              for i, s in enumerate(senders))
            pause_until(measure_end)
            tcp1 = [tcp_counters(s, ctx.dir / f"snmp-end-{i + 1}.txt")
                    for i, s in enumerate(senders)]
            for proc in procs:
                proc.wait(timeout=max(1.0, measure_end - time.time()) + 60)
        finally:
            for sender, proc in zip(senders, procs):
                if proc.poll() is None:  # ours, still running after a failure: end it all
                    subprocess.run([*stack.docker_cmd(sender), "exec", sender.id, *stop],
                                   capture_output=True, timeout=120, check=False)
                    proc.kill()
                    proc.wait(timeout=30)
            for out in outs:
                out.close()
        parts: dict[int, list[str]] = {k: [] for k, _, _ in tagged}
        for c in range(len(senders)):
            for line in (ctx.dir / f"{n.tool}-sender{c + 1}.txt").read_text().splitlines():
                tag, _, rest = line.partition(" ")
                if tag.isdigit() and int(tag) in parts:
                    parts[int(tag)].append(rest)
        ext = "csv" if n.tool == "iperf2" else "json"
        for k, lines in parts.items():
            (ctx.dir / f"{n.tool}-{k}.{ext}").write_text("\n".join(lines) + "\n")
        if n.tool == "iperf2":
            results = [net.parse_iperf2_csv("\n".join(parts[k]), warmup_s=n.warmup_s,
                                            server_port=flow.port) for k, flow, _ in tagged]
        else:
            results = [net.parse_iperf3_json("\n".join(parts[k])) for k, _, _ in tagged]
        total = net.sum_throughput(results)
        sent = sum(b["OutSegs"] - a["OutSegs"] for a, b in zip(tcp0, tcp1))
        received = sum(b["InSegs"] - a["InSegs"] for a, b in zip(tcp0, tcp1))
        # every data connection (and iperf3's control connection per process) held from the
        # start of the measured window to its middle
        held = conns * f["clients"] + (len(plan) if n.tool == "iperf3" else 0)
        values: dict[str, Any] = {
            "connections_asked": conns * f["clients"], "connections_established": established,
            "connections_at_start": at_start,
            "connections_check": "ok" if min(at_start, established) >= held else
            f"short: {min(at_start, established)} of {held} established in the window",
            "sender_processes": len(plan), "window": window,
            "bytes_per_s": total["bytes_per_second"],
            "mb_per_s": total["bytes_per_second"] / 1e6,
            "mbit_per_s": total["bits_per_second"] / 1e6,
            "segments_per_ack": sent / received if received else None,
            "retransmits": sum(b["RetransSegs"] - a["RetransSegs"] for a, b in zip(tcp0, tcp1))}
        if profiler is not None:
            values.update(finish_profile(ctx, profiler, n.tool, values["mbit_per_s"]))
        return values

    def latency(self, ctx: PointContext, n: Net, started: float) -> dict[str, Any]:
        """sockperf ping-pong from every sender, one session to the first receiver or one to
        each, all at once, for warm-up + measured seconds."""
        f = ctx.point.factors
        senders = ctx.deployment.info["senders"]
        addresses = ctx.deployment.info["addresses"]
        shift = ctx.deployment.info.get("shift") or [0] * len(addresses)
        targets = list(zip(addresses, shift))
        targets = targets if n.per_receiver else targets[:1]
        sessions = [(c, a, d) for c in range(len(senders)) for a, d in targets]
        # every sender has its own sockperf server port on each receiver
        argvs = [net.sockperf_command(a, port=net.SOCKPERF_PORT + d + c,
                                      message_size=f["message_size"],
                                      duration_s=n.warmup_s + n.measure_s)
                 for c, a, d in sessions]
        procs, outs = [], []
        try:
            for c, sender in enumerate(senders):
                script = net.start_at(started) + "; " + " ".join(
                    f"({shlex.join(argv)} 2>&1 | sed -u 's/^/{k} /') &"
                    for k, ((client, _, _), argv) in enumerate(zip(sessions, argvs), 1)
                    if client == c) + " wait"
                out = (ctx.dir / f"sockperf-sender{c + 1}.txt").open("w")
                outs.append(out)
                procs.append(subprocess.Popen([*stack.docker_cmd(sender), "exec", sender.id,
                                               "sh", "-c", script],
                                              stdout=out, stderr=subprocess.STDOUT))
            for at in (started + n.warmup_s, started + n.warmup_s + n.measure_s / 2):
                pause_until(at)
                ctx.sampler.mark()
            for proc in procs:
                proc.wait(timeout=start_delay() + n.warmup_s + n.measure_s + 60)
        finally:
            for sender, proc in zip(senders, procs):
                if proc.poll() is None:
                    subprocess.run([*stack.docker_cmd(sender), "exec", sender.id, "pkill",
                                    "-KILL", "-f", "sockperf ping-pong"], capture_output=True,
                                   timeout=120, check=False)
                    proc.kill()
                    proc.wait(timeout=30)
            for out in outs:
                out.close()
        parts: dict[int, list[str]] = {k: [] for k in range(1, len(sessions) + 1)}
        for c in range(len(senders)):
            for line in (ctx.dir / f"sockperf-sender{c + 1}.txt").read_text().splitlines():
                tag, _, rest = line.partition(" ")
                if tag.isdigit() and int(tag) in parts:
                    parts[int(tag)].append(rest)
        results = []
        for k, lines in parts.items():
            text = "\n".join(lines) + "\n"
            (ctx.dir / f"sockperf-{k}.txt").write_text(text)
            results.append(net.parse_sockperf(text))
        r = net.combine_latency(results)
        return {"sessions": r["sessions"], "latency_avg_us": r["latency_avg_us"],
                "p50_us": r["p50_us"], "p99_us": r["p99_us"], "messages": r["messages"],
                "messages_per_s": r["messages_per_s"],
                "bytes_per_s": 2 * r["messages_per_s"] * f["message_size"]}

    def after_point(self, exp: Experiment, point: Point, row: dict[str, Any],
                    deployment: Deployment) -> None:
        """A receiver that stopped ends the run with one sentence naming it (on a cluster, a
        node whose Docker engine stopped answering)."""
        try:
            running = {c.id for c in placer.current().replicas()}
        except stack.StackError as exc:
            raise RunEnds(f"{exc} during {point.id}; the run ends here") from None
        down = [c.name for c in deployment.info["receivers"] if c.id not in running]
        if down:
            raise RunEnds(f"receiver {', '.join(down)} stopped during {point.id}"
                          + (f" ({row['error']})" if row.get("error") else "")
                          + f": see `docker logs {down[0]}`; the run ends here")

    # -- results
    def identity(self, exp: Experiment, point: Point) -> dict[str, Any]:
        """point, test, factors, mode, repetition."""
        n = self.settings(exp)
        return {"point": point.id, "test": n.test, **point.factors, "mode": point.mode,
                "repetition": point.repetition}

    def columns(self, exp: Experiment) -> list[Column]:
        """Identity, then the figures of the test."""
        n = self.settings(exp)
        ident = (["connections", "write_size", "direction"] if n.test == "stream"
                 else ["message_size"]) + (["case"] if n.cases else [])
        figures = (["mbit_per_s", "mb_per_s", "connections_asked", "connections_established",
                    "connections_at_start", "connections_check", "sender_processes", "window",
                    "segments_per_ack", "retransmits"]
                   if n.test == "stream" else
                   ["p50_us", "p99_us", "latency_avg_us", "messages_per_s", "sessions"])
        if n.profile:
            figures += PROFILE_COLUMNS
        return [Column(c) for c in ["point", "test", "receivers", "clients", *ident, "mode",
                                    "repetition", *figures, *CPU_COLUMNS]]

    def brief(self, row: dict[str, Any]) -> str:
        """Throughput or latency, and CPU per KB on each side."""
        if row.get("error"):
            return f"FAILED ({row['error']})"
        head = (f"{row['mbit_per_s']:.0f} Mb/s over {row['connections_established']} "
                "connections" if "mbit_per_s" in row else
                f"p50 {row['p50_us']:.1f} us, {row['messages_per_s']:.0f} messages/s")
        return (f"{head}, CPU sender {row['client_cpu_us_per_kb']:.2f} / receivers "
                f"{row['server_cpu_us_per_kb']:.2f} us/KB")

    def report(self, resolved: dict[str, Any]) -> dict[str, Any]:
        """The family of the experiment (by name, the longest that fits), factors in the
        file's order."""
        block = resolved.get("net") or {}
        name = str(resolved.get("name", ""))
        spec = families.load(families.by_name(
            "net", name, "net-latency" if block.get("test") == "latency" else "net-streams"))
        order = {k: list(block[k]) for k in ("receivers", "clients", "connections",
                                             "write_size", "direction", "message_size", "cases")
                 if isinstance(block.get(k), list)}
        if "cases" in order:
            order["case"] = order.pop("cases")
        spec["order"] = {k: v for k, v in order.items() if len(v) > 1}
        return spec


CPU_COLUMNS = ["window_s", "bytes_moved", "cpu_s_net-client", "cpu_s_net-server",
               "cpu_s_servers", "client_cpu_s", "client_cpu_pct", "client_usr_pct",
               "client_sys_pct", "server_cpu_pct", "host_usr_pct", "host_sys_pct",
               "host_irq_pct", "host_softirq_pct", "host_idle_pct", "client_cpu_us_per_kb",
               "server_cpu_us_per_kb", "host_cpu_us_per_kb"]
PROFILE_COLUMNS = ["prof_samples", "prof_write_pct", "prof_tcp_output_pct",
                   "prof_driver_tx_pct", "prof_ack_pct", "prof_idle_pct", "prof_tool_pct",
                   "prof_other_pct", "prof_write_pct_per_gbit", "prof_tcp_output_pct_per_gbit",
                   "prof_driver_tx_pct_per_gbit", "prof_ack_pct_per_gbit",
                   "prof_sender_samples", "prof_write_sender_pct", "prof_tcp_output_sender_pct",
                   "prof_driver_tx_sender_pct", "prof_ack_sender_pct"]


def cpu_figures(first: dict, last: dict, bytes_per_s: float) -> dict[str, Any]:
    """Per-side and host CPU over the bracketing samples; the bytes the tool moved at its
    measured rate over the same span (bytes_moved); µs per KB moved."""
    dt = last["t"] - first["t"]
    cpu = counters.cpu_seconds(first, last)
    host = counters.host_breakdown(first["host"], last["host"])
    sender, receivers = cpu.get(SENDER, 0.0), cpu.get(RECEIVER, 0.0)
    a, b = first["cpu"].get(SENDER, {}), last["cpu"].get(SENDER, {})
    usr = b.get("user_s", 0.0) - a.get("user_s", 0.0)
    sys_ = b.get("system_s", 0.0) - a.get("system_s", 0.0)
    out: dict[str, Any] = {"window_s": dt, f"cpu_s_{SENDER}": sender,
                           f"cpu_s_{RECEIVER}": receivers, "cpu_s_servers": receivers,
                           "client_cpu_s": sender,
                           "client_cpu_pct": 100 * sender / dt if dt else None,
                           "client_usr_pct": 100 * usr / dt if dt else None,
                           "client_sys_pct": 100 * sys_ / dt if dt else None,
                           "server_cpu_pct": 100 * receivers / dt if dt else None,
                           "host_usr_pct": host["usr_pct"], "host_sys_pct": host["sys_pct"],
                           "host_irq_pct": host["irq_pct"],
                           "host_softirq_pct": host["softirq_pct"],
                           "host_idle_pct": host["idle_pct"]}
    out["bytes_moved"] = round(bytes_per_s * dt)
    if bytes_per_s > 0 and dt > 0:
        kb = bytes_per_s * dt / 1024
        out.update({"client_cpu_us_per_kb": sender * 1e6 / kb,
                    "server_cpu_us_per_kb": receivers * 1e6 / kb,
                    "host_cpu_us_per_kb": host["busy_s"] * 1e6 / kb})
    return out


def start_delay() -> float:
    """How far ahead every sender process is told to start (more on a cluster node)."""
    return START_DELAY_S + placer.current().exec_lead_s


def pause_until(t: float) -> None:
    """Sleep until wall-clock time t (no-op when it has passed)."""
    time.sleep(max(0.0, t - time.time()))


def established_now(sender: stack.Container, keep: Path, ports: set[int]) -> int:
    """Established TCP connections from a sender to the servers' `ports`, from the /proc tables
    of its network namespace (kept in `keep`; on a cluster node the node's, where other
    connections are left out by their ports)."""
    text = placer.current().proc_net(sender, ("tcp", "tcp6"))
    keep.write_text(text)
    tables = [t for t in text.split("  sl ") if t.strip()]
    return sum(net.count_established_proc("  sl " + t, ports) for t in tables)


def tcp_counters(sender: stack.Container, keep: Path) -> dict[str, int]:
    """The TCP counters of a sender's network namespace (/proc/PID/net/snmp, kept in `keep`;
    on a cluster node the node's)."""
    text = placer.current().proc_net(sender, ("snmp",))
    if not text.strip():
        raise ValueError(f"the TCP counters of {sender.name} cannot be read: the sender "
                         "stopped")
    keep.write_text(text)
    return net.parse_snmp_tcp(text)


# -- the senders' kernel profile (NET-txprofile)
#
# On one host perf runs here. On a cluster it runs on the `net_client` node over SSH (the senders
# run there, with host networking): the check, the recording on the senders' CPUs (their cpusets
# read on that node), and perf script / perf report there; only their text comes back.

PERF_DIR = "perf"  # under the cluster file's workdir on the sender node, removed after a point
# What perf_check runs (here, or on the sender node): perf's presence, a 0.1 s system-wide
# recording of the CPU clock (its first error line), and the first 50 lines of /proc/kallsyms.
PERF_PROBE = ("command -v perf >/dev/null 2>&1 || { echo NO-PERF; exit 0; }; "
              "perf record -q -e cpu-clock -a -g -o /dev/null -- sleep 0.1 >/dev/null "
              "2>/tmp/.tierbench-perf-probe && echo RECORD-OK || "
              "{ echo RECORD-FAILED; head -n 1 /tmp/.tierbench-perf-probe; }; "
              "rm -f /tmp/.tierbench-perf-probe; echo KALLSYMS; head -n 50 /proc/kallsyms")


@dataclass
class Profiler:
    """perf record under way for one point: here (``node`` None) or on the sender node, where
    ``remote`` is the folder holding perf.data."""

    proc: subprocess.Popen
    node: Any = None
    remote: str | None = None


def sender_node() -> Any:
    """The node the senders run on (the cluster file's net_client), or None on one host or
    when the role is not placed (the role check names it)."""
    cluster = placer.current().cluster
    if cluster is None:
        return None
    found = cluster.nodes_for("net_client")
    return found[0] if found else None


def perf_problem(source: str, probe: str, where: str = "this host") -> str | None:
    """The one-sentence refusal PERF_PROBE's output calls for, or None when perf can profile
    (it samples the CPU clock system-wide and the kernel's symbol addresses are readable)."""
    lines = probe.splitlines()
    if not lines or lines[0].strip() == "NO-PERF":
        return (f"{source}: net.profile needs perf on {where} (Debian and Ubuntu: apt-get "
                "install linux-perf); nothing was run")
    if lines[0].strip() != "RECORD-OK":
        why = (lines[1].strip() if len(lines) > 1 and lines[1].strip() != "KALLSYMS"
               else "no reason given")[:200]
        return (f"{source}: net.profile: perf cannot sample the CPU clock on {where} ({why}); "
                "run as root with kernel.perf_event_paranoid <= 1, or drop net.profile; "
                "nothing was run")
    syms = lines[lines.index("KALLSYMS") + 1:] if "KALLSYMS" in lines else []
    if not any(line.split()[0].strip("0") for line in syms if line.strip()):
        return (f"{source}: net.profile: the kernel's symbol addresses are hidden on {where} "
                "(/proc/kallsyms reads zeros), so a profile could not name the kernel's "
                "functions; run as root with kernel.kptr_restrict <= 1; nothing was run")
    return None


def perf_check(source: str, node: Any = None) -> None:
    """Refuse, with one sentence, a profile this host (or the sender node ``node``, over SSH)
    cannot take: no perf, perf that cannot sample the CPU clock of the whole system, or hidden
    kernel symbols."""
    if node is None:
        probe = subprocess.run(["sh", "-c", PERF_PROBE], capture_output=True, text=True,
                               timeout=60, check=False).stdout
        where = "this host"
    else:
        probe = nodes.run_on_node(node, PERF_PROBE, timeout=60).stdout
        where = f"node {node.name} (the senders' node, net_client)"
    found = perf_problem(source, probe, where)
    if found:
        raise ConfigError(found)


def perf_record_argv(cpus: str, seconds: float, out: str) -> list[str]:
    """perf record of the CPU clock with call graphs on ``cpus`` for ``seconds`` into ``out``."""
    return ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(PROFILE_HZ), "-g", "-C", cpus,
            "-o", out, "--", "sleep", str(seconds)]


def perf_text_argvs(data: str) -> tuple[list[str], list[str]]:
    """perf script (what the categories are counted from) and perf report (kept for people)."""
    return (["perf", "script", "-i", data, "-F", "comm,pid,cpu,ip,sym"],
            ["perf", "report", "-i", data, "--stdio", "--children", "--sort", "sym",
             "--percent-limit", "1", "-g", "none"])


def node_cpusets(node: Any, pids: list[int]) -> str:
    """The CPUs the containers with these (node) PIDs may run on, read on their node: each main
    process's Cpus_allowed_list (its cpuset), comma-joined as a cpuset list reads."""
    script = "; ".join(f"grep -s '^Cpus_allowed_list:' /proc/{int(p)}/status" for p in pids)
    out = nodes.run_on_node(node, script + "; true", timeout=60).stdout
    return ",".join(dict.fromkeys(line.split(":", 1)[1].strip() for line in out.splitlines()
                                  if line.startswith("Cpus_allowed_list:")))


def start_profile(ctx: PointContext, senders: list[stack.Container],
                  seconds: float) -> Profiler:
    """perf record (cpu-clock, call graphs) on the senders' CPUs for `seconds`: here, or on
    the sender node over SSH (into WORKDIR/perf/<run>-<point> there)."""
    node = sender_node() if any(s.node for s in senders) else None
    log_file = (ctx.dir / "perf-record.log").open("w")
    if node is None:
        cpus = ",".join(dict.fromkeys(c for s in senders if (c := CgroupCpu(s.pid).cpus())))
        ctx.record["profile"] = {"cpus": cpus, "hz": PROFILE_HZ, "event": "cpu-clock",
                                 "seconds": seconds}
        return Profiler(subprocess.Popen(perf_record_argv(cpus, seconds,
                                                          str(ctx.dir / "perf.data")),
                                         stdout=subprocess.DEVNULL, stderr=log_file))
    cpus = node_cpusets(node, [s.pid for s in senders if s.node == node.name])
    if not cpus:
        raise MeasureError(f"{node.name}: the senders' CPUs could not be read there "
                           "(/proc/PID/status), so perf has nothing to sample")
    remote = (f"{placer.current().cluster.workdir}/{PERF_DIR}/"
              f"{ctx.dir.parent.parent.name}-{ctx.dir.name}")
    ctx.record["profile"] = {"cpus": cpus, "hz": PROFILE_HZ, "event": "cpu-clock",
                             "seconds": seconds, "node": node.name}
    script = (f"mkdir -p {shlex.quote(remote)} && exec "
              + shlex.join(perf_record_argv(cpus, seconds, f"{remote}/perf.data")))
    return Profiler(subprocess.Popen(nodes.ssh_argv(node, script), stdout=subprocess.DEVNULL,
                                     stderr=log_file, stdin=subprocess.DEVNULL), node, remote)


def profile_texts(ctx: PointContext, profiler: Profiler) -> tuple[str, str]:
    """Wait for perf record, then perf script's and perf report's text (on the sender node for
    a cluster: run there, the text copied back, perf.data removed there)."""
    profiler.proc.wait(timeout=120)
    if profiler.node is None:
        script_argv, report_argv = perf_text_argvs(str(ctx.dir / "perf.data"))
        script = subprocess.run(script_argv, capture_output=True, text=True, timeout=600,
                                check=False)
        report = subprocess.run(report_argv, capture_output=True, text=True, timeout=600,
                                check=False)
        return script.stdout, report.stdout
    node, remote = profiler.node, profiler.remote
    script_argv, report_argv = perf_text_argvs(f"{remote}/perf.data")
    try:
        script = nodes.run_on_node(node, shlex.join(script_argv) + " 2>/dev/null", timeout=600,
                                   check=False)
        report = nodes.run_on_node(node, shlex.join(report_argv) + " 2>/dev/null", timeout=600,
                                   check=False)
    finally:
        nodes.run_on_node(node, f"rm -rf {shlex.quote(remote)}", timeout=60, check=False)
    return script.stdout, report.stdout


def finish_profile(ctx: PointContext, profiler: Profiler, tool: str,
                   mbit_per_s: float) -> dict[str, Any]:
    """Wait for perf, then the inclusive shares of 001's categories (perf script kept as
    perf-script.txt, perf report as perf-report.txt)."""
    script, report = profile_texts(ctx, profiler)
    (ctx.dir / "perf-script.txt").write_text(script)
    (ctx.dir / "perf-report.txt").write_text(report)
    prof = net.parse_perf_script(script, ({"iperf2": "iperf"}.get(tool, tool),))
    ctx.record["profile"]["top"] = prof["top"]
    gbit = mbit_per_s / 1000
    out: dict[str, Any] = {"prof_samples": prof["samples"],
                           "prof_sender_samples": prof["sender_samples"]}
    for cat in ("write", "tcp_output", "driver_tx", "ack", "idle", "tool", "other"):
        out[f"prof_{cat}_pct"] = prof[f"{cat}_pct"]
    for cat in ("write", "tcp_output", "driver_tx", "ack"):
        out[f"prof_{cat}_sender_pct"] = prof[f"{cat}_sender_pct"]
    for cat in ("write", "tcp_output", "driver_tx", "ack"):
        out[f"prof_{cat}_pct_per_gbit"] = prof[f"{cat}_pct"] / gbit if gbit > 0 else None
    return out


# -- NET-dmacopy (000 §4.4)


def dma_channels(root: Path = Path("/sys/class/dma")) -> list[tuple[str, str]]:
    """The host's dmaengine channels and their drivers (ioatdma, idxd, ...), e.g.
    [('dma0chan0', 'ioatdma')]."""
    out = []
    for chan in sorted(root.glob("dma*chan*")):
        driver = chan / "device" / "driver"
        out.append((chan.name, driver.resolve().name if driver.exists() else "unknown driver"))
    return out


def dmacopy_check(source: str, root: Path = Path("/sys/class/dma")) -> None:
    """NET-dmacopy runs only on a DMA copy engine; refuse with one sentence saying why not."""
    found = dma_channels(root)
    if not found:
        raise ConfigError(f"{source}: NET-dmacopy is unavailable on this host: it needs a DMA "
                          f"copy engine (an ioatdma or idxd channel in {root}) and there is "
                          "none; nothing was run")
    names = ", ".join(f"{c} ({d})" for c, d in found)
    raise ConfigError(f"{source}: NET-dmacopy found {names}, but its copy benchmark is not built "
                      "yet (it was written on a host without a copy engine, where it could not "
                      "be checked); nothing was run")


def net_files() -> list[str]:
    """The network tier's compose files (the base file names the project's networks)."""
    return [str(stack.ROOT / "docker-compose.yml"), str(stack.ROOT / stack.NET_OVERLAY)]


def receiver_env(receivers: int, ports: int, ports3: int, clients: int) -> list[dict[str, str]]:
    """Each receiver's ports when receivers share one host's (PORT_STRIDE apart)."""
    return [{"NET_IPERF_PORT": str(net.IPERF_PORT + i * PORT_STRIDE),
             "NET_IPERF3_PORT": str(net.IPERF3_PORT + i * PORT_STRIDE),
             "NET_SOCKPERF_PORT": str(net.SOCKPERF_PORT + i * PORT_STRIDE),
             "NET_IPERF_SERVERS": str(ports), "NET_IPERF3_SERVERS": str(ports3),
             "NET_SOCKPERF_SERVERS": str(clients)} for i in range(receivers)]


def discover(receivers: int, clients: int = 1) -> Deployment:
    """The running network tier wherever it runs: senders and receivers, their CPU counters
    and interfaces."""
    where = placer.current()
    found = [c for c in where.replicas() if c.service in TIERS]
    senders = [c for c in found if c.service == SENDER]
    servers = [c for c in found if c.service == RECEIVER]
    if len(senders) != clients or len(servers) != receivers:
        raise stack.StackError(f"the network tier is not up as asked ({clients} sender(s), "
                               f"{receivers} receiver(s); found {len(senders)} and "
                               f"{len(servers)}): see `docker compose -f docker-compose.yml "
                               "-f compose/net.yml logs`")
    tiers = {}
    cpus: dict[str, CgroupCpu | CgroupGroup] = {}
    for service, role, group in ((SENDER, CLIENT, senders), (RECEIVER, SERVER, servers)):
        eps, parts = [], {}
        for i, c in enumerate(group, 1):
            label = f"{service}-{i}" if len(group) > 1 else service
            eps += where.endpoints(label, c)
            parts[label] = where.counter(c)
        tiers[service] = Tier(service, role, eps, group)
        cpus[service] = CgroupGroup(parts) if len(group) > 1 else parts[service]
    addresses = [where.address(c, "198.18.4.") for c in servers]
    shift = [i * PORT_STRIDE if where.shares_ports() else 0 for i in range(len(servers))]
    ifaces = where.ifaces([ep for t in tiers.values() for ep in t.endpoints])
    return Deployment((receivers, clients), tiers, cpus, ifaces,
                      containers={SENDER: senders[0], RECEIVER: servers[0]},
                      info={"sender": senders[0], "senders": senders, "receivers": servers,
                            "addresses": addresses, "shift": shift}, placer=where)
