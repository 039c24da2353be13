"""The network micro-benchmark kind (000 §4, 001, 003 §5, 004 §6.1): TCP between a sender
container (`net-client`) and receiver containers (`net-server`, compose/net.yml) on their own
network, through the same runner and modes as every kind.

Two tests:
- `stream`: bulk TCP with iperf 2 (a thread per connection, CSV interval reports, thousands of
  connections per process): `connections` spread evenly over the receivers and over their iperf
  servers (4 ports each), one sender process per server port, all started together; write size,
  direction (one way, or both ways on the same sockets) and socket buffer as factors. The warm-up
  intervals are dropped from iperf's reports; the established connections are counted with `ss`
  inside the sender while the run is under way.
- `latency`: request/response with sockperf ping-pong (one message in flight, percentiles of
  half the round trip, as 004 Fig. 14 reports one-way latency) against the first receiver.

CPU is measured by tierbench, per side (the containers' cgroups) and for the host, over the
samples that bracket the measured window, never from the tools' own figures (which count only
their process). The receivers' CPU is `cpu_s_servers`; costs are CPU µs per KB moved
(netperf's service demand); the report adds cycles per KB from the host's clock (an estimate).
"""

from __future__ import annotations

import copy
import os
import shlex
import subprocess
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from tierbench.config.errors import ConfigError
from tierbench.config.models import Model, choice, flag, one_or_many, whole
from tierbench.kinds import net
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
)
from tierbench.measure import counters
from tierbench.measure.counters import MeasureError
from tierbench.measure.sampler import CgroupCpu, CgroupGroup
from tierbench.placement import compose as stack
from tierbench.placement import placer

SENDER, RECEIVER = "net-client", "net-server"
TIERS = (SENDER, RECEIVER)
TESTS = ("stream", "latency")
# iperf 2 servers per receiver (NET_IPERF_SERVERS in compose/net.yml): at least 4, and enough
# that none serves more than PER_SERVER connections: an iperf 2.1.8 server accepting 375 at once
# was seen to crash here (malloc: corrupted list) and take its receiver down with it
PORTS_PER_RECEIVER = 4
PER_SERVER = 100
IMAGE = "tierbench-net"
MAX_CONNECTIONS = 6000
# Receivers that share one host's ports (a cluster node, host networking): receiver i listens on
# every port of the single-host layout plus (i - 1) x PORT_STRIDE.
PORT_STRIDE = 1000


class Net(Model):
    """The `net:` block of a network experiment."""

    test: choice(*TESTS)
    # receivers (000's links: one receiver per port of the sender); a list is a factor
    receivers: one_or_many(whole(1, 15), "whole number") = [1]
    connections: one_or_many(whole(1, MAX_CONNECTIONS), "whole number") = [1]
    # connections counts per receiver (000 NET-bw: one connection per link and direction)
    per_receiver: flag() = False
    write_size: one_or_many(whole(1, 16 * 1024 * 1024), "whole number") = [131072]
    direction: one_or_many(choice("uni", "bi"), "direction") = ["uni"]
    window: whole(4096) | None = None
    message_size: one_or_many(whole(net.SOCKPERF_MIN_MESSAGE, 65536), "whole number") = [64]
    warmup_s: whole(0, 60) = 2
    measure_s: whole(1, 600) = 10


class NetSettings(Model):
    """The keys of a network experiment besides the common ones."""

    net: Net


def total_connections(n: Net, connections: int, receivers: int) -> int:
    """The connections of a point in all (per receiver when the experiment says so)."""
    return connections * receivers if n.per_receiver else connections


def iperf_servers(n: Net, receivers: int) -> int:
    """iperf 2 servers each of `receivers` receivers runs for the experiment's largest point."""
    most = total_connections(n, max(n.connections), receivers) if n.test == "stream" else 1
    return max(PORTS_PER_RECEIVER, -(-most // (receivers * PER_SERVER)))


def slots(addresses: list[str] | list[tuple[str, int]], ports_each: int,
          connections: int) -> list[tuple[str, int, int]]:
    """(receiver address, iperf port, connections) per sender process: the connections spread
    evenly over every receiver's iperf servers, the busiest getting at most one more. A receiver
    is its address, or (address, its first iperf port) when receivers share ports."""
    bases = [(a, net.IPERF_PORT) if isinstance(a, str) else a for a in addresses]
    ports = [(a, base + k) for k in range(ports_each) for a, base in bases]
    ports = ports[: max(1, min(len(ports), connections))]
    base, extra = divmod(connections, len(ports))
    return [(a, p, base + (1 if i < extra else 0)) for i, (a, p) in enumerate(ports)
            if base + (1 if i < extra else 0) > 0]


class NetKind(Kind):
    """TCP micro-benchmarks between containers: bulk throughput and request/response latency."""

    name = "net"
    description = "network micro-benchmarks: bulk TCP (iperf 2) and latency (sockperf)"
    model = NetSettings
    block = "net"
    tiers = TIERS
    roles = ("net_client", "net_server")
    bring_up = "the network tier's bring-up (seconds)"
    variation_pct = 5.0

    def check(self, exp: Experiment) -> None:
        """No web or proxy servers here for a mode's server options."""
        for m in exp.modes:
            if m.server:
                raise ConfigError(f"{exp.source}: modes: {m.name} sets options of the web and "
                                  "proxy servers, which a network experiment does not run")

    def settings(self, exp: Experiment) -> Net:
        return exp.settings.net  # type: ignore[attr-defined, no-any-return]

    def resolved(self, exp: Experiment) -> dict[str, Any]:
        """The resolved experiment (manifest and experiment.yml)."""
        n = self.settings(exp)
        block: dict[str, Any] = {"test": n.test, "receivers": list(n.receivers),
                                 "warmup_s": n.warmup_s, "measure_s": n.measure_s}
        if n.test == "stream":
            block.update(connections=list(n.connections), per_receiver=n.per_receiver,
                         write_size=list(n.write_size), direction=list(n.direction),
                         window=n.window)
        else:
            block.update(message_size=list(n.message_size))
        return {"name": exp.name, "kind": self.name, "description": exp.description,
                "source": exp.source, "seed": exp.seed, "repetitions": exp.repetitions,
                "settle_s": exp.settle_s, "modes": [m.as_dict() for m in exp.modes],
                "net": block}

    def axes(self, exp: Experiment) -> list[tuple[str, list[Any]]]:
        """receivers x (stream: write size x direction x connections; latency: message size)
        x mode x repetition."""
        n = self.settings(exp)
        factors: list[tuple[str, list[Any]]] = [("receivers", list(n.receivers))]
        if n.test == "stream":
            factors += [("write_size", list(n.write_size)), ("direction", list(n.direction)),
                        ("connections", list(n.connections))]
        else:
            factors += [("message_size", list(n.message_size))]
        return factors + [("mode", [m.name for m in exp.modes]),
                          ("repetition", list(range(1, exp.repetitions + 1)))]

    def placement(self, exp: Experiment, combo: dict[str, Any] | Point) -> Hashable:
        """The number of receivers: each number is one deployment."""
        return combo["receivers"]

    def order(self, exp: Experiment, combos: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Shuffled within each number of receivers, those in the order listed."""
        listed = list(self.settings(exp).receivers)
        return sorted(combos, key=lambda c: listed.index(c["receivers"]))

    # -- plan
    def point_seconds(self, exp: Experiment) -> float:
        """settle + warm-up + measured + start, stop and counting."""
        n = self.settings(exp)
        return exp.settle_s + n.warmup_s + n.measure_s + 4

    def plan_header(self, exp: Experiment, points: list[Point]) -> list[str]:
        """The test, the tool and the time per point."""
        n = self.settings(exp)
        tool = "iperf 2" if n.test == "stream" else "sockperf ping-pong"
        return [f"experiment {exp.name} ({exp.source}): {len(points)} points, order shuffled "
                f"with seed {exp.seed}; test {n.test} ({tool}), 1 sender, "
                f"{'/'.join(map(str, n.receivers))} receiver(s)",
                f"per point: settle {exp.settle_s:g} s + warm-up {n.warmup_s} s + measured "
                f"{n.measure_s} s + about 4 s to start and stop the tools"
                + ("; connections per receiver" if n.per_receiver and n.test == "stream"
                   else "")]

    def placement_line(self, exp: Experiment, point: Point, first: bool) -> str:
        """The network tier."""
        return (f"  -- network tier: 1 sender ({SENDER}), {point['receivers']} "
                f"receiver(s) ({RECEIVER}) on 198.18.4.0/24")

    def point_line(self, exp: Experiment, point: Point) -> str:
        """Factors, mode and repetition."""
        return (f"  {point.id}  {self.what(point):<34} mode={point.mode:<16} "
                f"rep={point.repetition}  ~{self.point_seconds(exp):.0f} s")

    def what(self, point: Point) -> str:
        f = point.factors
        if "connections" in f:
            return (f"rx={f['receivers']} conns={f['connections']} write={f['write_size']} "
                    f"dir={f['direction']}")
        return f"rx={f['receivers']} message={f['message_size']} B"

    def point_title(self, exp: Experiment, point: Point) -> str:
        """How the progress line names a point."""
        return f"{point.id} {self.what(point)} {point.mode} rep {point.repetition}"

    # -- run
    def preflight(self, exp: Experiment, points: list[Point]) -> None:
        """The image exists."""
        stack.require_image(IMAGE)

    def deploy(self, exp: Experiment, key: Hashable, prepared: Any,
               previous: Deployment | None, point: Point) -> Deployment:
        """compose/net.yml up: 1 sender and the receivers (the web stack goes first)."""
        receivers = int(key)  # type: ignore[arg-type]
        ports = iperf_servers(self.settings(exp), receivers)
        where = placer.current()
        log(f"tierbench: bringing the network tier up on {where.name} (1 sender, {receivers} "
            f"receiver(s), {ports} iperf servers each)")
        where.down()
        env = {**stack.dotenv(), **os.environ, "NET_IPERF_SERVERS": str(ports)}
        where.up(stack.Services(net_files(), env, services=[RECEIVER, SENDER],
                                scale={RECEIVER: receivers, SENDER: 1},
                                replica_env={RECEIVER: receiver_env(receivers, ports)},
                                timeout=300))
        deployment = discover(receivers)
        deployment.info["ports"] = ports
        return deployment

    def running(self) -> Deployment | None:
        """The network tier, when it is up."""
        found = [c for c in placer.current().replicas() if c.service in TIERS]
        receivers = sum(1 for c in found if c.service == RECEIVER)
        return discover(receivers) if receivers and any(c.service == SENDER for c in found) \
            else None

    def provenance(self, exp: Experiment, deployment: Deployment) -> dict[str, Any]:
        """The tools' versions as the sender's image reports them."""
        sender = deployment.info["sender"]
        out = {}
        for tool, argv in (("iperf", ["iperf", "-v"]), ("sockperf", ["sockperf", "--version"])):
            done = stack.exec_in(sender, argv, timeout=30)
            text = (done.stdout + done.stderr).strip().splitlines()
            out[tool] = text[0] if text else "unknown"
        return {"tools": out}

    def run_point(self, ctx: PointContext) -> PointResult:
        """Run the tool(s), then the figures over the samples bracketing the measured window."""
        n = self.settings(ctx.exp)
        started = time.time()
        try:
            if n.test == "stream":
                values = self.stream(ctx, n)
            else:
                values = self.latency(ctx, n)
        except subprocess.TimeoutExpired as exc:
            ctx.sampler.stop()
            return PointResult(error=f"{exc.cmd[4] if len(exc.cmd) > 4 else 'the tool'} did "
                               f"not finish within {exc.timeout:.0f} s and was stopped (the "
                               "host may be overloaded by this many connections)")
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

    def stream(self, ctx: PointContext, n: Net) -> dict[str, Any]:
        """iperf 2 from the sender to every receiver's ports at once; connections counted."""
        f = ctx.point.factors
        sender = ctx.deployment.info["sender"]
        info = ctx.deployment.info
        shift = info.get("shift") or [0] * len(info["addresses"])
        plan = slots([(a, net.IPERF_PORT + d) for a, d in zip(info["addresses"], shift)],
                     info.get("ports", PORTS_PER_RECEIVER),
                     total_connections(n, f["connections"], f["receivers"]))
        # every sender process starts at once from one shell in the sender (one `docker exec`
        # per process would start them seconds apart on a loaded host), each line tagged with
        # its process number; the raw output is split per process afterwards
        commands = [net.iperf2_command(address, port=port, streams=conns, interval_s=1,
                                       duration_s=n.measure_s, warmup_s=n.warmup_s,
                                       write_size=f["write_size"], window=n.window,
                                       direction=f["direction"])
                    for address, port, conns in plan]
        script = " ".join(f"({shlex.join(argv)} 2>&1 | sed -u 's/^/{k} /') &"
                          for k, argv in enumerate(commands, 1)) + " wait"
        raw = ctx.dir / "iperf.txt"
        with raw.open("w") as out:
            proc = subprocess.Popen([*stack.docker_cmd(sender), "exec", sender.id, "sh", "-c",
                                     script], stdout=out, stderr=subprocess.STDOUT)
            try:
                # while every stream runs: the connections the sender's namespace holds
                time.sleep(n.warmup_s + n.measure_s / 2)
                established = established_now(sender, ctx.dir / "established.txt",
                                              {port for _, port, _ in plan})
                proc.wait(timeout=n.warmup_s + n.measure_s + 60)
            finally:
                if proc.poll() is None:  # ours, still running after a failure: end it all
                    subprocess.run([*stack.docker_cmd(sender), "exec", sender.id, "pkill",
                                    "-KILL", "-f", "iperf -c"], capture_output=True,
                                   timeout=120, check=False)
                    proc.kill()
                    proc.wait(timeout=30)
        parts: dict[int, list[str]] = {k: [] for k in range(1, len(plan) + 1)}
        for line in raw.read_text().splitlines():
            tag, _, rest = line.partition(" ")
            if tag.isdigit() and int(tag) in parts:
                parts[int(tag)].append(rest)
        for k, lines in parts.items():
            (ctx.dir / f"iperf-{k}.csv").write_text("\n".join(lines) + "\n")
        results = [net.parse_iperf2_csv((ctx.dir / f"iperf-{i + 1}.csv").read_text(),
                                        warmup_s=n.warmup_s, server_port=plan[i][1])
                   for i in range(len(plan))]
        total = net.sum_throughput(results)
        return {"connections_established": established, "sender_processes": len(plan),
                "bytes_per_s": total["bytes_per_second"],
                "mb_per_s": total["bytes_per_second"] / 1e6,
                "mbit_per_s": total["bits_per_second"] / 1e6}

    def latency(self, ctx: PointContext, n: Net) -> dict[str, Any]:
        """sockperf ping-pong to the first receiver for warm-up + measured seconds."""
        f = ctx.point.factors
        sender = ctx.deployment.info["sender"]
        info = ctx.deployment.info
        argv = net.sockperf_command(info["addresses"][0],
                                    port=net.SOCKPERF_PORT + (info.get("shift") or [0])[0],
                                    message_size=f["message_size"],
                                    duration_s=n.warmup_s + n.measure_s)
        done = subprocess.run([*stack.docker_cmd(sender), "exec", sender.id, *argv],
                              capture_output=True, text=True,
                              timeout=n.warmup_s + n.measure_s + 60)
        (ctx.dir / "sockperf.txt").write_text(done.stdout + done.stderr)
        r = net.parse_sockperf(done.stdout + done.stderr)
        pct = r["percentiles"]
        rate = r["received_messages"] / r["valid_seconds"] if r["valid_seconds"] else 0.0
        return {"latency_avg_us": r["avg"], "p50_us": pct.get("50"), "p99_us": pct.get("99"),
                "messages": r["received_messages"], "messages_per_s": rate,
                "bytes_per_s": 2 * rate * f["message_size"]}

    def after_point(self, exp: Experiment, point: Point, row: dict[str, Any],
                    deployment: Deployment) -> None:
        """A receiver that stopped ends the run with one sentence naming it."""
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
                 else ["message_size"])
        figures = (["mbit_per_s", "mb_per_s", "connections_established", "sender_processes"]
                   if n.test == "stream" else
                   ["p50_us", "p99_us", "latency_avg_us", "messages_per_s"])
        return [Column(c) for c in ["point", "test", "receivers", *ident, "mode", "repetition",
                                    *figures, *CPU_COLUMNS]]

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
        """The family of the experiment (by name), factors in the file's order."""
        block = resolved.get("net") or {}
        name = str(resolved.get("name", ""))
        fam = next((f for f in FAMILIES if name.startswith(f)),
                   "net-latency" if block.get("test") == "latency" else "net-streams")
        spec = copy.deepcopy(FAMILIES[fam])
        order = {k: list(block[k]) for k in ("receivers", "connections", "write_size",
                                             "direction", "message_size")
                 if isinstance(block.get(k), list)}
        spec["order"] = {k: v for k, v in order.items() if len(v) > 1}
        return spec


CPU_COLUMNS = ["window_s", "bytes_moved", "cpu_s_net-client", "cpu_s_net-server",
               "cpu_s_servers", "client_cpu_pct", "server_cpu_pct", "host_usr_pct",
               "host_sys_pct", "host_irq_pct", "host_softirq_pct", "host_idle_pct",
               "client_cpu_us_per_kb", "server_cpu_us_per_kb", "host_cpu_us_per_kb"]


def cpu_figures(first: dict, last: dict, bytes_per_s: float) -> dict[str, Any]:
    """Per-side and host CPU over the bracketing samples; the bytes the tool moved at its
    measured rate over the same span (bytes_moved); µs per KB moved."""
    dt = last["t"] - first["t"]
    cpu = counters.cpu_seconds(first, last)
    host = counters.host_breakdown(first["host"], last["host"])
    sender, receivers = cpu.get(SENDER, 0.0), cpu.get(RECEIVER, 0.0)
    out: dict[str, Any] = {"window_s": dt, f"cpu_s_{SENDER}": sender,
                           f"cpu_s_{RECEIVER}": receivers, "cpu_s_servers": receivers,
                           "client_cpu_pct": 100 * sender / dt if dt else None,
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


def established_now(sender: stack.Container, keep: Path, ports: set[int]) -> int:
    """Established TCP connections from the sender to the iperf servers' `ports`, from the
    /proc tables of its network namespace (kept in `keep`; on a cluster node the node's, where
    other connections are left out by their ports)."""
    text = placer.current().tcp_tables(sender)
    keep.write_text(text)
    tables = [t for t in text.split("  sl ") if t.strip()]
    return sum(net.count_established_proc("  sl " + t, ports) for t in tables)


def net_files() -> list[str]:
    """The network tier's compose files (the base file names the project's networks)."""
    return [str(stack.ROOT / "docker-compose.yml"), str(stack.ROOT / stack.NET_OVERLAY)]


def receiver_env(receivers: int, ports: int) -> list[dict[str, str]]:
    """Each receiver's ports when receivers share one host's (PORT_STRIDE apart)."""
    return [{"NET_IPERF_PORT": str(net.IPERF_PORT + i * PORT_STRIDE),
             "NET_IPERF3_PORT": str(net.IPERF3_PORT + i * PORT_STRIDE),
             "NET_SOCKPERF_PORT": str(net.SOCKPERF_PORT + i * PORT_STRIDE),
             "NET_IPERF_SERVERS": str(ports)} for i in range(receivers)]


def discover(receivers: int) -> Deployment:
    """The running network tier: sender and receivers, their CPU counters and interfaces."""
    where = placer.current()
    found = [c for c in where.replicas() if c.service in TIERS]
    senders = [c for c in found if c.service == SENDER]
    servers = [c for c in found if c.service == RECEIVER]
    if not senders or len(servers) != receivers:
        raise stack.StackError(f"the network tier is not up as asked (1 sender, {receivers} "
                               f"receiver(s); found {len(senders)} and {len(servers)}): see "
                               "`docker compose -f docker-compose.yml -f compose/net.yml logs`")
    sender = senders[0]
    tiers = {SENDER: Tier(SENDER, CLIENT, where.endpoints(SENDER, sender), [sender])}
    eps, parts = [], {}
    for i, c in enumerate(servers, 1):
        label = f"{RECEIVER}-{i}" if receivers > 1 else RECEIVER
        eps += where.endpoints(label, c)
        parts[label] = where.counter(c)
    tiers[RECEIVER] = Tier(RECEIVER, SERVER, eps, servers)
    cpus: dict[str, CgroupCpu | CgroupGroup] = {
        SENDER: where.counter(sender),
        RECEIVER: CgroupGroup(parts) if receivers > 1 else parts[RECEIVER]}
    addresses = [where.address(c, "198.18.4.") for c in servers]
    shift = [i * PORT_STRIDE if where.shares_ports() else 0 for i in range(len(servers))]
    ifaces = where.ifaces([ep for t in tiers.values() for ep in t.endpoints])
    return Deployment(receivers, tiers, cpus, ifaces,
                      containers={SENDER: sender, RECEIVER: servers[0]},
                      info={"sender": sender, "receivers": servers, "addresses": addresses,
                            "shift": shift}, placer=where)


# The families' report sections (analysis/README.md, "The report spec"); the papers' numbers are
# those of the catalogue (000, 001, 004: 2004-2008 hardware), labelled as such by the report.
FAMILIES: dict[str, dict[str, Any]] = {}
FAMILIES['net-streams'] = {
 'kind': 'net',
 'family': 'net-streams',
 'title': 'Throughput and CPU by parallel streams (000 §4.2 Fig. 4)',
 'description': 'Bulk TCP from one sender over 1..N parallel connections (iperf 2); '
                'throughput in Mb/s (MB/s x 8) and CPU per KB on each side.',
 'phases': None,
 'factors': ['connections'],
 'sections': ['write_size', 'direction'],
 'primary': {'column': 'mb_per_s', 'label': 'throughput', 'unit': 'MB/s'},
 'columns': ['mbit_per_s', 'connections_established', 'client_cpu_pct', 'server_cpu_pct',
             'client_cpu_us_per_kb', 'server_cpu_us_per_kb', 'host_cpu_us_per_kb',
             'host_usr_pct', 'host_sys_pct', 'host_softirq_pct', 'host_idle_pct'],
 'costs': ['server_cpu_us_per_kb', 'client_cpu_us_per_kb', 'host_cpu_us_per_kb'],
 'benefit': ['server_cpu_us_per_kb', 'host_cpu_us_per_kb'],
 'baseline': None,
 'figures': [{'type': 'lines', 'x': 'connections', 'y': 'mb_per_s', 'scale': 8,
              'logx': True, 'series': 'mode', 'title': 'Measured here: throughput',
              'xlabel': 'parallel streams (connections)', 'ylabel': 'Mb/s'},
             {'type': 'lines', 'x': 'connections', 'y': 'server_cpu_pct', 'logx': True,
              'series': 'mode', 'title': "Measured here: the receivers' CPU",
              'xlabel': 'parallel streams (connections)', 'ylabel': 'CPU (% of one core)'}],
 'reference': {'figure': '000 §4.2 Fig. 4',
               'labels': ['with I/OAT', 'without I/OAT'],
               'rows': [],
               'note': 'at 120 threads the receiver used 52 % CPU with I/OAT against 76 % '
                       'without (32 % relative benefit); without it throughput dropped at 120 '
                       'threads, with it there was no drop'}}
FAMILIES['net-latency'] = {
 'kind': 'net',
 'family': 'net-latency',
 'title': 'One-way latency by message size (004 §6.1 Fig. 14a)',
 'description': 'sockperf ping-pong, one message in flight: half the round trip, median and '
                '99th percentile.',
 'phases': None,
 'factors': ['message_size'],
 'sections': [],
 'primary': {'column': 'p50_us', 'label': 'median one-way latency', 'unit': 'µs'},
 'columns': ['p99_us', 'latency_avg_us', 'messages_per_s', 'client_cpu_pct', 'server_cpu_pct',
             'host_cpu_us_per_kb'],
 'costs': ['host_cpu_us_per_kb'],
 'benefit': ['host_cpu_us_per_kb'],
 'baseline': None,
 'figures': [{'type': 'lines', 'x': 'message_size', 'y': 'p50_us', 'logx': True,
              'series': 'mode', 'title': 'Measured here: median one-way latency',
              'xlabel': 'message size (bytes)', 'ylabel': 'latency (µs)'}],
 'reference': {'figure': '004 §6.1 Fig. 14a',
               'labels': ['2.4 GHz hosts', '700 MHz hosts'],
               'rows': [{'x': '4-byte messages', 'quantity': 'one-way latency', 'unit': 'µs',
                         'with': 27, 'without': 59, 'match': {'message_size': 14},
                         'column': 'p50_us'}],
               'note': "4-byte latency 27 / 45 / 59 µs on 2.4 GHz / 1 GHz / 700 MHz hosts; "
                       "sockperf's smallest message is 14 bytes, matched here"}}
FAMILIES['net-conns'] = {'kind': 'net',
 'family': 'net-conns',
 'title': 'Throughput and cycles/KB by connections (001)',
 'description': 'Bulk transmit from one sender over 1..6000 connections with 1K, 8K and 64K '
                'writes; throughput in Mb/s (MB/s x 8).',
 'phases': None,
 'factors': ['write_size', 'connections'],
 'sections': ['write_size'],
 'primary': {'column': 'mb_per_s', 'label': 'throughput', 'unit': 'MB/s'},
 'columns': ['server_cpu_us_per_kb',
             'host_cpu_us_per_kb',
             'server_cycles_per_kb',
             'host_usr_pct',
             'host_sys_pct',
             'host_irq_pct',
             'host_softirq_pct',
             'host_idle_pct'],
 'costs': ['server_cpu_us_per_kb'],
 'benefit': ['server_cpu_us_per_kb'],
 'baseline': None,
 'figures': [{'type': 'table',
              'rows': 'connections',
              'columns': 'write_size',
              'series': 'mode',
              'values': [{'column': 'mb_per_s', 'label': 'Mb/s', 'scale': 8},
                         {'column': 'server_cycles_per_kb', 'label': 'cycles/KB'}],
              'title': 'Mb/s · cycles per KB by connections x write size'},
             {'type': 'lines',
              'x': 'connections',
              'y': 'mb_per_s',
              'scale': 8,
              'logx': True,
              'series': ['write_size', 'mode'],
              'title': 'Measured here: throughput',
              'xlabel': 'connections',
              'ylabel': 'Mb/s'},
             {'type': 'lines',
              'x': 'connections',
              'y': 'server_cycles_per_kb',
              'logx': True,
              'series': ['write_size', 'mode'],
              'title': 'Measured here: cycles per KB',
              'xlabel': 'connections',
              'ylabel': 'cycles / KB'}],
 'reference': {'figure': '001 (TCP transmit, 10 GbE sender to 15 receivers)',
               'labels': ['10GbE with LSO', '—'],
               'rows': [{'x': '64K writes, 1 connection',
                         'quantity': 'throughput',
                         'unit': 'Mb/s',
                         'with': 928,
                         'without': None,
                         'match': {'connections': 1, 'write_size': 65536},
                         'column': 'mb_per_s',
                         'scale': 8},
                        {'x': '64K writes, 1 connection',
                         'quantity': 'cycles per KB',
                         'unit': 'cycles/KB',
                         'with': 11792,
                         'without': None,
                         'match': {'connections': 1, 'write_size': 65536},
                         'column': 'server_cycles_per_kb'},
                        {'x': '64K writes, 100 connections',
                         'quantity': 'throughput',
                         'unit': 'Mb/s',
                         'with': 9240,
                         'without': None,
                         'match': {'connections': 100, 'write_size': 65536},
                         'column': 'mb_per_s',
                         'scale': 8},
                        {'x': '64K writes, 100 connections',
                         'quantity': 'cycles per KB',
                         'unit': 'cycles/KB',
                         'with': 3161,
                         'without': None,
                         'match': {'connections': 100, 'write_size': 65536},
                         'column': 'server_cycles_per_kb'},
                        {'x': '64K writes, 6000 connections',
                         'quantity': 'throughput',
                         'unit': 'Mb/s',
                         'with': 6370,
                         'without': None,
                         'match': {'connections': 6000, 'write_size': 65536},
                         'column': 'mb_per_s',
                         'scale': 8},
                        {'x': '64K writes, 6000 connections',
                         'quantity': 'cycles per KB',
                         'unit': 'cycles/KB',
                         'with': 17053,
                         'without': None,
                         'match': {'connections': 6000, 'write_size': 65536},
                         'column': 'server_cycles_per_kb'},
                        {'x': '1K writes, 1 connection',
                         'quantity': 'throughput',
                         'unit': 'Mb/s',
                         'with': 915,
                         'without': None,
                         'match': {'connections': 1, 'write_size': 1024},
                         'column': 'mb_per_s',
                         'scale': 8},
                        {'x': '1K writes, 1 connection',
                         'quantity': 'cycles per KB',
                         'unit': 'cycles/KB',
                         'with': 13450,
                         'without': None,
                         'match': {'connections': 1, 'write_size': 1024},
                         'column': 'server_cycles_per_kb'},
                        {'x': '1K writes, 32 connections',
                         'quantity': 'throughput',
                         'unit': 'Mb/s',
                         'with': 5970,
                         'without': None,
                         'match': {'connections': 32, 'write_size': 1024},
                         'column': 'mb_per_s',
                         'scale': 8},
                        {'x': '1K writes, 32 connections',
                         'quantity': 'cycles per KB',
                         'unit': 'cycles/KB',
                         'with': 18792,
                         'without': None,
                         'match': {'connections': 32, 'write_size': 1024},
                         'column': 'server_cycles_per_kb'},
                        {'x': '1K writes, 6000 connections',
                         'quantity': 'throughput',
                         'unit': 'Mb/s',
                         'with': 3970,
                         'without': None,
                         'match': {'connections': 6000, 'write_size': 1024},
                         'column': 'mb_per_s',
                         'scale': 8},
                        {'x': '1K writes, 6000 connections',
                         'quantity': 'cycles per KB',
                         'unit': 'cycles/KB',
                         'with': 40209,
                         'without': None,
                         'match': {'connections': 6000, 'write_size': 1024},
                         'column': 'server_cycles_per_kb'}],
               'note': 'one mode only in the paper (LSO on): its numbers are absolute, not a '
                       'with/without pair; socket window 256K up to 100 connections, 32K above'}}
FAMILIES['net-csum'] = {
 'kind': 'net',
 'family': 'net-csum',
 'title': 'CPU per KB with checksum offload on and off (004 §6.3.1 Table 5)',
 'description': 'Bulk TCP over one connection; the CPU each side spends per KB moved, every '
                'offload on against rx/tx checksum offload off.',
 'phases': None,
 'factors': ['write_size'],
 'sections': [],
 'primary': {'column': 'server_cpu_us_per_kb', 'label': 'receiver CPU per KB', 'unit': 'µs/KB'},
 'columns': ['client_cpu_us_per_kb', 'host_cpu_us_per_kb', 'mbit_per_s', 'client_cpu_pct',
             'server_cpu_pct'],
 'costs': ['server_cpu_us_per_kb', 'client_cpu_us_per_kb', 'host_cpu_us_per_kb'],
 'benefit': ['server_cpu_us_per_kb', 'client_cpu_us_per_kb'],
 'baseline': 'checksum-off',
 'figures': [{'type': 'bars', 'x': 'write_size', 'y': 'server_cpu_us_per_kb', 'series': 'mode',
              'title': 'Measured here: receiver CPU per KB', 'xlabel': 'write size (bytes)',
              'ylabel': 'CPU (µs / KB)'},
             {'type': 'bars', 'x': 'write_size', 'y': 'client_cpu_us_per_kb', 'series': 'mode',
              'title': 'Measured here: sender CPU per KB', 'xlabel': 'write size (bytes)',
              'ylabel': 'CPU (µs / KB)'}],
 'reference': {'figure': '004 §6.3.1 Table 5',
               'labels': ['micro-benchmark', 'data center'],
               'rows': [],
               'note': "004 estimated the receiver's per-KB costs: checksum 8.42, copy 1.95 in a "
                       'micro-benchmark (one hot buffer) against 5.17 inside the data center '
                       '(cache misses), and up to 15 % less response time at 16 KB with '
                       'checksum offload; the testbed measures the saving instead'}}
FAMILIES['net-bw'] = {
 'kind': 'net',
 'family': 'net-bw',
 'title': 'Throughput and receiver CPU by links, one way and both ways (000 §4.1 Fig. 3)',
 'description': 'One connection per receiver (a link in the paper) and direction, 1..N '
                'receivers, data one way and then both ways on the same sockets.',
 'phases': None,
 'factors': ['receivers', 'direction'],
 'sections': ['direction'],
 'primary': {'column': 'mb_per_s', 'label': 'throughput', 'unit': 'MB/s'},
 'columns': ['mbit_per_s', 'connections_established', 'client_cpu_pct', 'server_cpu_pct',
             'client_cpu_us_per_kb', 'server_cpu_us_per_kb', 'host_cpu_us_per_kb'],
 'costs': ['server_cpu_us_per_kb', 'client_cpu_us_per_kb', 'host_cpu_us_per_kb'],
 'benefit': ['server_cpu_us_per_kb', 'host_cpu_us_per_kb'],
 'baseline': None,
 'figures': [{'type': 'lines', 'x': 'receivers', 'y': 'mb_per_s', 'scale': 8,
              'series': ['direction', 'mode'], 'title': 'Measured here: throughput',
              'xlabel': 'links (receivers)', 'ylabel': 'Mb/s'},
             {'type': 'lines', 'x': 'receivers', 'y': 'server_cpu_pct',
              'series': ['direction', 'mode'], 'title': "Measured here: the receivers' CPU",
              'xlabel': 'links (receivers)', 'ylabel': 'CPU (% of one core)'}],
 'reference': {'figure': '000 §4.1 Fig. 3',
               'labels': ['with I/OAT', 'without I/OAT'],
               'rows': [],
               'note': 'with 6 GbE ports: 5635 Mb/s one way and 9600 Mb/s both ways; the '
                       "receiver's CPU was lower with I/OAT at every number of ports"}}
FAMILIES['net-msgsize'] = {
 'kind': 'net',
 'family': 'net-msgsize',
 'title': 'Throughput and CPU by message size (000 §4.5 Fig. 7)',
 'description': '4 connections from one sender to 4 receivers, each write one message of '
                '16 KB..128 KB (Fig. 7a) or 1 MB and more (Fig. 7b).',
 'phases': None,
 'factors': ['write_size'],
 'sections': [],
 'primary': {'column': 'mb_per_s', 'label': 'throughput', 'unit': 'MB/s'},
 'columns': ['mbit_per_s', 'client_cpu_pct', 'server_cpu_pct', 'client_cpu_us_per_kb',
             'server_cpu_us_per_kb', 'host_cpu_us_per_kb'],
 'costs': ['server_cpu_us_per_kb', 'client_cpu_us_per_kb', 'host_cpu_us_per_kb'],
 'benefit': ['server_cpu_us_per_kb', 'host_cpu_us_per_kb'],
 'baseline': None,
 'figures': [{'type': 'lines', 'x': 'write_size', 'y': 'server_cpu_us_per_kb', 'logx': True,
              'series': 'mode', 'title': "Measured here: the receivers' CPU per KB",
              'xlabel': 'message (write) size (bytes)', 'ylabel': 'CPU (µs / KB)'},
             {'type': 'lines', 'x': 'write_size', 'y': 'mb_per_s', 'scale': 8, 'logx': True,
              'series': 'mode', 'title': 'Measured here: throughput',
              'xlabel': 'message (write) size (bytes)', 'ylabel': 'Mb/s'}],
 'reference': {'figure': '000 §4.5 Fig. 7',
               'labels': ['DMA engine + split headers', 'none'],
               'rows': [],
               'note': "000 compared no offload, the DMA copy engine and the engine with split "
                       "headers: the receiver's CPU fell with both, most for large messages; "
                       'the testbed has no DMA engine (NET-dmacopy) and compares the modes that '
                       'exist (GRO, header-data split where the NIC has it)'}}
