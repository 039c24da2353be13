"""One network point, as a sequence: every process of every sender started at one instant,
marks in the measured window, what the senders' namespaces count while it runs (connections,
TCP segments) and the senders' CPUs profiled when asked; then the tools' reports and the CPU
figures over the samples that bracket the measured window."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from tierbench.kinds.contract import PointContext, PointResult
from tierbench.kinds.net import profile, tools
from tierbench.kinds.net.flows import commands, flows
from tierbench.kinds.net.settings import Net, NetSettings, total_connections, window_for
from tierbench.kinds.net.stack import RECEIVER, SENDER, NetInfo
from tierbench.measure import counters
from tierbench.measure.counters import MeasureError
from tierbench.placement import model, placer
from tierbench.transport import DidNotFinish, Process, STDOUT

START_DELAY_S = 1.0  # every sender process starts this far ahead, at the same instant
CPU_COLUMNS = ["window_s", "bytes_moved", "cpu_s_net-client", "cpu_s_net-server",
               "cpu_s_servers", "client_cpu_s", "client_cpu_pct", "client_usr_pct",
               "client_sys_pct", "server_cpu_pct", "host_usr_pct", "host_sys_pct",
               "host_irq_pct", "host_softirq_pct", "host_idle_pct", "client_cpu_us_per_kb",
               "server_cpu_us_per_kb", "host_cpu_us_per_kb"]


def start_delay(where: placer.Placer) -> float:
    """How far ahead every sender process is told to start (more on a cluster node)."""
    return START_DELAY_S + where.exec_lead_s


def pause_until(t: float) -> None:
    """Sleep until wall-clock time t (no-op when it has passed)."""
    time.sleep(max(0.0, t - time.time()))


class AtOnce:
    """Every process of every sender started at the same instant from one shell per sender (one
    `docker exec` per process would start them seconds apart on a loaded host), each output line
    tagged with its process number (1, 2, ...); the senders' output kept as NAME-senderK.txt.
    Leaving the block ends whatever of ours still runs (``stop``: the pkill pattern)."""

    def __init__(self, where: placer.Placer, folder: Path, senders: list[model.Container],
                 name: str, stop: str) -> None:
        self.folder, self.senders, self.name, self.stop = folder, senders, name, stop
        self.where = where
        self.procs: list[Process] = []
        self.outs: list[IO[str]] = []
        self.count = 0

    def __enter__(self) -> AtOnce:
        return self

    def start(self, at: float, jobs: list[tuple[int, list[str]]]) -> None:
        """Start each job (sender index, argv), numbered from 1, at wall-clock time ``at``."""
        self.count = len(jobs)
        for c, sender in enumerate(self.senders):
            script = tools.start_at(at) + "; " + " ".join(
                f"({shlex.join(argv)} 2>&1 | sed -u 's/^/{k} /') &"
                for k, (client, argv) in enumerate(jobs, 1) if client == c) + " wait"
            out = (self.folder / f"{self.name}-sender{c + 1}.txt").open("w")
            self.outs.append(out)
            self.procs.append(self.where.popen(sender, ["sh", "-c", script], stdout=out,
                                               stderr=STDOUT))

    def wait(self, timeout: Callable[[], float]) -> None:
        """Wait for every sender's shell, each at most ``timeout()`` seconds."""
        for proc in self.procs:
            proc.wait(timeout=timeout())

    def __exit__(self, *exc: object) -> None:
        for sender, proc in zip(self.senders, self.procs):
            if proc.poll() is None:  # ours, still running after a failure: end it all
                self.where.exec(sender, ["pkill", "-KILL", "-f", self.stop], timeout=120)
                proc.kill()
                proc.wait(timeout=30)
        for out in self.outs:
            out.close()

    def outputs(self) -> dict[int, list[str]]:
        """What each process printed, by its number."""
        parts: dict[int, list[str]] = {k: [] for k in range(1, self.count + 1)}
        for c in range(len(self.senders)):
            for line in (self.folder / f"{self.name}-sender{c + 1}.txt").read_text().splitlines():
                tag, _, rest = line.partition(" ")
                if tag.isdigit() and int(tag) in parts:
                    parts[int(tag)].append(rest)
        return parts


NetContext = PointContext[NetSettings, NetInfo, Any]


def run(ctx: NetContext, n: Net) -> PointResult:
    """Run the tool(s), then the figures over the samples bracketing the measured window."""
    started = time.time() + start_delay(ctx.deployment.placer)
    try:
        if n.test == "stream":
            values = stream(ctx, n, started)
        else:
            values = latency(ctx, n, started)
    except DidNotFinish as exc:
        ctx.close_window()
        return PointResult(error=f"{n.tool if n.test == 'stream' else 'sockperf'} did not "
                           f"finish within {exc.timeout:.0f} s and was stopped (the host "
                           "may be overloaded by this many connections)")
    except (tools.NetParseError, ValueError) as exc:
        ctx.close_window()
        return PointResult(error=f"{exc}")
    samples = ctx.close_window()
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


def stream(ctx: NetContext, n: Net, started: float) -> dict[str, Any]:
    """The tool from every sender to the receivers' ports, all processes at once; connections
    counted, TCP counters read, the senders' CPUs profiled when asked."""
    f = ctx.point.factors
    info = ctx.deployment.info
    senders = info.senders
    conns = total_connections(n, f["connections"], f["receivers"])
    window = window_for(n, conns)
    plan = flows(n, info.addresses, conns, f["clients"], info.ports, info.shift)
    ports = {flow.port for flow in plan}
    argvs = commands(n, plan, f["write_size"], f["direction"], window)
    measure_end = started + n.warmup_s + n.measure_s
    where = ctx.deployment.placer
    with AtOnce(where, ctx.dir, senders, n.tool,
                "iperf -c" if n.tool == "iperf2" else "iperf3 -c") as launched:
        launched.start(started, [(flow.client, argv) for flow, argv in zip(plan, argvs)])
        pause_until(started + n.warmup_s)
        ctx.mark()
        tcp0 = [tcp_counters(where, s, ctx.dir / f"snmp-start-{i + 1}.txt")
                for i, s in enumerate(senders)]
        at_start = sum(established_now(where, s, ctx.dir / f"established-start-{i + 1}.txt", ports)
                       for i, s in enumerate(senders))
        profiler = profile.start(ctx, senders, n.measure_s) if n.profile else None
        pause_until(started + n.warmup_s + n.measure_s / 2)
        ctx.mark()
        established = sum(established_now(where, s, ctx.dir / f"established-{i + 1}.txt", ports)
                          for i, s in enumerate(senders))
        pause_until(measure_end)
        tcp1 = [tcp_counters(where, s, ctx.dir / f"snmp-end-{i + 1}.txt")
                for i, s in enumerate(senders)]
        launched.wait(lambda: max(1.0, measure_end - time.time()) + 60)
    parts = launched.outputs()
    ext = "csv" if n.tool == "iperf2" else "json"
    for k, lines in parts.items():
        (ctx.dir / f"{n.tool}-{k}.{ext}").write_text("\n".join(lines) + "\n")
    if n.tool == "iperf2":
        results = [tools.parse_iperf2_csv("\n".join(parts[k]), warmup_s=n.warmup_s,
                                          server_port=flow.port)
                   for k, flow in enumerate(plan, 1)]
    else:
        results = [tools.parse_iperf3_json("\n".join(parts[k])) for k in parts]
    total = tools.sum_throughput(results)
    sent = sum(b["OutSegs"] - a["OutSegs"] for a, b in zip(tcp0, tcp1))
    received = sum(b["InSegs"] - a["InSegs"] for a, b in zip(tcp0, tcp1))
    # every data connection (and iperf3's control connection per process) held from the start
    # of the measured window to its middle
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
        values.update(profile.finish(ctx, profiler, n.tool, values["mbit_per_s"]))
    return values


def latency(ctx: NetContext, n: Net, started: float) -> dict[str, Any]:
    """sockperf ping-pong from every sender, one session to the first receiver or one to each,
    all at once, for warm-up + measured seconds."""
    f = ctx.point.factors
    senders = ctx.deployment.info.senders
    addresses = ctx.deployment.info.addresses
    shift = ctx.deployment.info.shift or [0] * len(addresses)
    targets = list(zip(addresses, shift))
    targets = targets if n.per_receiver else targets[:1]
    sessions = [(c, a, d) for c in range(len(senders)) for a, d in targets]
    # every sender has its own sockperf server port on each receiver
    jobs = [(c, tools.sockperf_command(a, port=tools.SOCKPERF_PORT + d + c,
                                       message_size=f["message_size"],
                                       duration_s=n.warmup_s + n.measure_s))
            for c, a, d in sessions]
    with AtOnce(ctx.deployment.placer, ctx.dir, senders, "sockperf",
                "sockperf ping-pong") as launched:
        launched.start(started, jobs)
        for at in (started + n.warmup_s, started + n.warmup_s + n.measure_s / 2):
            pause_until(at)
            ctx.mark()
        launched.wait(lambda: start_delay(ctx.deployment.placer) + n.warmup_s + n.measure_s + 60)
    results = []
    for k, lines in launched.outputs().items():
        text = "\n".join(lines) + "\n"
        (ctx.dir / f"sockperf-{k}.txt").write_text(text)
        results.append(tools.parse_sockperf(text))
    r = tools.combine_latency(results)
    return {"sessions": r["sessions"], "latency_avg_us": r["latency_avg_us"],
            "p50_us": r["p50_us"], "p99_us": r["p99_us"], "messages": r["messages"],
            "messages_per_s": r["messages_per_s"],
            "bytes_per_s": 2 * r["messages_per_s"] * f["message_size"]}


def established_now(where: placer.Placer, sender: model.Container, keep: Path,
                    ports: set[int]) -> int:
    """Established TCP connections from a sender to the servers' `ports`, from the /proc tables
    of its network namespace (kept in `keep`; on a cluster node the node's, where other
    connections are left out by their ports)."""
    text = where.proc_net(sender, ("tcp", "tcp6"))
    keep.write_text(text)
    tables = [t for t in text.split("  sl ") if t.strip()]
    return sum(tools.count_established_proc("  sl " + t, ports) for t in tables)


def tcp_counters(where: placer.Placer, sender: model.Container, keep: Path) -> dict[str, int]:
    """The TCP counters of a sender's network namespace (/proc/PID/net/snmp, kept in `keep`; on
    a cluster node the node's)."""
    text = where.proc_net(sender, ("snmp",))
    if not text.strip():
        raise ValueError(f"the TCP counters of {sender.name} cannot be read: the sender "
                         "stopped")
    keep.write_text(text)
    return tools.parse_snmp_tcp(text)


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
