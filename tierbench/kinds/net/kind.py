"""The network kind as the contract sees it: its settings, the modes layered over the cases,
the axes and the deployment key (receivers x senders), the plan's lines, and each part of the
run handed to the module of the package that does it."""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any, cast

from tierbench.config.errors import ConfigError
from tierbench.kinds import families
from tierbench.kinds.contract import (Column, Deployment, Experiment, Kind, Point, PointContext,
                                      PointResult, end_if_stopped, failed, log,
                                      tool_versions)
from tierbench.kinds.net import dmacopy, flows, profile, sequence, stack
from tierbench.kinds.net.settings import Net, NetSettings
from tierbench.kinds.net.dmacopy import CopyPlan
from tierbench.kinds.net.roles import ROLES
from tierbench.kinds.net.stack import NetInfo
from tierbench.modes.model import Mode, load_layered, load_mode
from tierbench.placement import placer
from tierbench import space


class NetKind(Kind[NetSettings, NetInfo, CopyPlan | None]):
    """TCP micro-benchmarks between containers: bulk throughput and request/response latency."""

    name = "net"
    description = ("network micro-benchmarks: bulk TCP (iperf 2 or iperf3) and latency "
                   "(sockperf)")
    model = NetSettings
    scalable = {"net.measure_s": 2, "net.warmup_s": 1}
    block = "net"
    tiers = stack.TIERS
    declared_roles = ROLES
    roles = ("net_client", "net_server")
    bring_up = "the network tier's bring-up (seconds)"
    variation_pct = 5.0

    def check(self, exp: Experiment[NetSettings]) -> None:
        """A mode's server options (none here) and the cases load."""
        super().check(exp)
        try:
            self.modes(exp)
        except ConfigError as exc:
            raise ConfigError(f"{exp.source}: net.cases: {exc}") from None

    def settings(self, exp: Experiment[NetSettings]) -> Net:
        return exp.settings.net

    def modes(self, exp: Experiment[NetSettings]) -> list[Mode]:
        """The experiment's modes, each layered over every case when there are cases."""
        cases = self.settings(exp).cases
        if not cases:
            return exp.modes
        return [load_layered([case, m.source]) for case in cases for m in exp.modes]

    def point_mode(self, exp: Experiment[NetSettings], point: Point) -> Mode:
        """The point's mode, layered over its case when there are cases."""
        mode = exp.mode(point.mode)
        if "case" not in point.factors:
            return mode
        return load_layered([point.factors["case"], mode.source])

    def resolved(self, exp: Experiment[NetSettings]) -> dict[str, Any]:
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
        return {**self.envelope(exp), "net": block}

    def axes(self, exp: Experiment[NetSettings]) -> list[tuple[str, list[Any]]]:
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

    def deployment_key(self, exp: Experiment[NetSettings], combo: dict[str, Any] | Point) -> Hashable:
        """The numbers of receivers and senders: each pair is one deployment."""
        return (combo["receivers"], combo["clients"])

    def order(self, exp: Experiment[NetSettings], combos: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Shuffled within each deployment, deployments in the order listed."""
        n = self.settings(exp)
        rx, cl = list(n.receivers), list(n.clients)
        return sorted(combos, key=lambda c: (rx.index(c["receivers"]), cl.index(c["clients"])))

    # -- plan
    def point_seconds(self, exp: Experiment[NetSettings]) -> float:
        """settle + common start + warm-up + measured + start, stop and counting (dmacopy:
        settle + the copies + starting them and the DMA half)."""
        n = self.settings(exp)
        if n.test == "dmacopy":
            return exp.settle_s + n.measure_s + 4
        return exp.settle_s + sequence.start_delay(exp.placer) + n.warmup_s + n.measure_s + 4

    def plan_header(self, exp: Experiment[NetSettings], points: list[Point]) -> list[str]:
        """The test, the tool and the time per point."""
        n = self.settings(exp)
        tool = ({"iperf2": "iperf 2", "iperf3": f"iperf3, {flows.IPERF3_STREAMS} connections per "
                 "process"}[n.tool] if n.test == "stream" else "sockperf ping-pong"
                if n.test == "latency" else "memcpy by copy size, and a DMA copy engine")
        if n.test == "dmacopy":
            return [f"{self.plan_head(exp, points)}; test dmacopy ({tool})",
                    f"per point: settle {exp.settle_s:g} s + copybench in the sender for "
                    f"{n.measure_s} s (half the same buffers again and again, in the cache; half "
                    f"a new pair each copy from two pools of {dmacopy.POOL_CACHE_FACTOR}x the "
                    "last-level cache, out of it) + about 4 s",
                    f"  the DMA half: dmatest's {dmacopy.DMA_ITERATIONS:,} copies on the first "
                    "ioatdma or idxd channel in /sys/class/dma, where this host has one; "
                    "elsewhere, and on a cluster, it is left out with one sentence"]
        senders = "/".join(map(str, n.clients))
        head = [f"{self.plan_head(exp, points)}; test {n.test} ({tool}), {senders} "
                f"sender{'s' if max(n.clients) > 1 else ''}, "
                f"{'/'.join(map(str, n.receivers))} receiver(s)",
                f"per point: settle {exp.settle_s:g} s + common start {sequence.start_delay(exp.placer):g} s + "
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
            head.append(f"  perf samples the senders' CPUs at {profile.PROFILE_HZ} Hz (cpu-clock, call "
                        "graphs) over the measured window")
        split = [m.name for m in exp.modes if "tcp-data-split" in m.knobs.rings]
        if split:
            head.append(f"  modes {', '.join(split)} set header-data split (ethtool -G "
                        "tcp-data-split), which veth lacks: on one host the run is refused "
                        "before its first point; run it with --cluster on NICs that have it "
                        "(000's DMA copy engine has no mode at all: Linux dropped NET_DMA in 3.19)")
        return head

    def deployment_line(self, exp: Experiment[NetSettings], point: Point, first: bool) -> str:
        """The network tier."""
        if self.settings(exp).test == "dmacopy":
            return (f"  -- network tier: 1 sender ({stack.SENDER}) runs the copies; no receiver")
        c = point["clients"]
        return (f"  -- network tier: {c} sender{'s' if c > 1 else ''} ({stack.SENDER}), "
                f"{point['receivers']} receiver(s) ({stack.RECEIVER}) on 198.18.4.0/24")

    def what(self, exp: Experiment[NetSettings], point: Point) -> str:
        """receivers, senders, case and the test's factors."""
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

    # -- run
    def needs(self, exp: Experiment[NetSettings], points: list[Point]) -> list[space.Need]:
        """Socket buffers of the flows.largest point, against free memory (dmacopy: the copy
        buffers)."""
        n = self.settings(exp)
        if n.test == "dmacopy":
            return dmacopy.needs(dmacopy.pool_bytes(dmacopy.llc_bytes()), max(n.message_size))
        most = max(((r, c) for r in n.receivers for c in n.clients),
                   key=lambda rc: flows.buffer_bytes(n, *rc))
        nbytes = flows.buffer_bytes(n, *most)
        if not nbytes:
            return []
        return [space.Need(f"socket buffers of {flows.largest(n, most[0]) * most[1]} connections",
                           nbytes, "memory (socket buffers)", space.memory_room(),
                           "lower net.connections or net.window")]

    def preflight(self, exp: Experiment[NetSettings], points: list[Point]) -> None:
        """The image; the containers' limits hold the flows.largest point; perf, for a
        profile."""
        n = self.settings(exp)
        if n.test == "dmacopy":
            exp.placer.ensure_images([stack.IMAGE])
            return
        conf = space.settings()
        try:
            nofile = int(conf.get("NET_NOFILE") or flows.NOFILE_DEFAULT)
        except ValueError:
            raise ConfigError(f"NET_NOFILE={conf.get('NET_NOFILE')!r} is not a whole number"
                              ) from None
        ports = flows.parse_range(conf.get("NET_PORT_RANGE") or flows.PORT_RANGE_DEFAULT)
        limit = flows.daemon_nofile()
        for r in n.receivers:
            for c in n.clients:
                found = flows.limit_problems(n, r, c, nofile, ports, limit)
                if found:
                    raise ConfigError(f"{exp.source}: {found[0]}; nothing was run")
        exp.placer.ensure_images([stack.IMAGE])
        if n.profile:  # on the senders' host (a cluster file without it: the run names it)
            for via in exp.placer.hosts(profile.SENDER_ROLE)[:1]:
                profile.perf_check(exp.source, via)

    def prepare(self, exp: Experiment[NetSettings], run_dir: Path) -> CopyPlan | None:
        """dmacopy: the copy pools' size, and the DMA copy engine it copies on (dmatest loaded
        for it) or the sentence saying why the DMA half is left out."""
        if self.settings(exp).test != "dmacopy":
            return None
        channel, said = dmacopy.dma_engine(not exp.placer.here(profile.SENDER_ROLE))
        loaded = False
        if channel:
            loaded, problem = dmacopy.load_dmatest()
            if problem:
                channel, said = None, f"{problem}, so the DMA half of NET-dmacopy is not run"
        log(f"tierbench: {said}")
        return CopyPlan(dmacopy.pool_bytes(dmacopy.llc_bytes()), channel, said, loaded)

    def deploy(self, exp: Experiment[NetSettings], key: Hashable, prepared: CopyPlan | None,
               previous: Deployment[NetInfo] | None, point: Point) -> Deployment[NetInfo]:
        """compose/net.yml up: the senders and the receivers (the web stack goes first);
        dmacopy: one sender."""
        if self.settings(exp).test == "dmacopy":
            deployment = stack.deploy_sender(exp.placer, key)
            deployment.info.copies = prepared
            return deployment
        receivers, clients = cast(tuple[int, int], key)  # deployment_key's
        return stack.deploy(exp.placer, self.settings(exp), receivers, clients)

    def finish(self, exp: Experiment[NetSettings], deployment: Deployment[NetInfo],
               ) -> list[str]:
        """The receivers stopped: iperf, iperf3 and sockperf servers admit whoever connects, so
        they listen only during the run (the next one brings the tier up anew); dmatest unloaded
        where the run loaded it."""
        notes = []
        if deployment.info.copies and deployment.info.copies.loaded_dmatest:
            dmacopy.unload_dmatest()
            notes.append("unloaded the kernel's dmatest module")
        where = exp.placer
        stopped = [c for c in where.replicas() if c.service == stack.RECEIVER]
        for c in stopped:
            where.stop(c)
        return notes + ([f"stopped the {len(stopped)} receiver(s) (iperf, iperf3 and sockperf "
                         "servers admit whoever connects)"] if stopped else [])

    def running(self, where: placer.Placer) -> Deployment[NetInfo] | None:
        """The network tier, when it is up."""
        return stack.running(where)

    def provenance(self, exp: Experiment[NetSettings], deployment: Deployment[NetInfo],
                   ) -> dict[str, Any]:
        """The tools' versions as the sender's image reports them."""
        sender = deployment.info.senders[0]
        out = tool_versions(deployment.placer, sender,
                            {"iperf": ["iperf", "-v"], "iperf3": ["iperf3", "--version"],
                             "sockperf": ["sockperf", "--version"]})
        if self.settings(exp).profile:
            out["perf"] = profile.version(deployment.placer.transport(sender))
        if self.settings(exp).test == "dmacopy":
            copies = deployment.info.copies
            return {"tools": out, "dma_engine": copies.dma_engine if copies else ""}
        return {"tools": out}

    def run_point(self, ctx: PointContext[NetSettings, NetInfo, CopyPlan | None]
                  ) -> PointResult:
        """Run the tool(s), then the figures over the samples bracketing the measured window
        (dmacopy: copybench's own times, and the DMA half's)."""
        n = self.settings(ctx.exp)
        if n.test == "dmacopy":
            return dmacopy.run_point(ctx, n.measure_s)
        return sequence.run(ctx, n)

    def after_point(self, exp: Experiment[NetSettings], point: Point, row: dict[str, Any],
                    deployment: Deployment[NetInfo]) -> None:
        """A receiver that stopped ends the run with one sentence naming it (on a cluster, a
        node whose Docker engine stopped answering)."""
        end_if_stopped(deployment.placer, point, row, deployment.info.receivers, "receiver ")

    def identity(self, exp: Experiment[NetSettings], point: Point) -> dict[str, Any]:
        """point, test, factors, mode, repetition."""
        n = self.settings(exp)
        return {"point": point.id, "test": n.test, **point.factors, "mode": point.mode,
                "repetition": point.repetition}

    def columns(self, exp: Experiment[NetSettings]) -> list[Column]:
        """Identity, then the figures of the test."""
        n = self.settings(exp)
        if n.test == "dmacopy":
            return [Column(c) for c in ["point", "test", "receivers", "clients", "message_size",
                                        "mode", "repetition", *dmacopy.COPY_COLUMNS]]
        ident = (["connections", "write_size", "direction"] if n.test == "stream"
                 else ["message_size"]) + (["case"] if n.cases else [])
        figures = (["mbit_per_s", "mb_per_s", "connections_asked", "connections_established",
                    "connections_at_start", "connections_check", "sender_processes", "window",
                    "segments_per_ack", "retransmits"]
                   if n.test == "stream" else
                   ["p50_us", "p99_us", "latency_avg_us", "messages_per_s", "sessions"])
        if n.profile:
            figures += profile.PROFILE_COLUMNS
        return [Column(c) for c in ["point", "test", "receivers", "clients", *ident, "mode",
                                    "repetition", *figures, *sequence.CPU_COLUMNS]]

    def brief(self, row: dict[str, Any]) -> str:
        """Throughput or latency, and CPU per KB on each side."""
        if note := failed(row):
            return note
        if "memcpy_hot_us" in row:
            dma = (f", DMA {row['dma_us_per_copy']:.2f} us" if row.get("dma_us_per_copy")
                   else "")
            return (f"memcpy {row['memcpy_hot_us']:.3f} us in cache, "
                    f"{row['memcpy_cold_us']:.3f} us out of it{dma}")
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
        spec["order"] = families.order(block, {
            "receivers": "receivers", "clients": "clients", "connections": "connections",
            "write_size": "write_size", "direction": "direction",
            "message_size": "message_size", "case": "cases"})
        return spec

