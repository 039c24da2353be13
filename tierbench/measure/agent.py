"""1 Hz sampling on cluster nodes, merged on the controller's clock.

A node runs a small agent over one SSH session: :mod:`tierbench.measure.nodesampler` from
tierbench's node bundle (:mod:`tierbench.nodeapp`, put in a private folder on the node first and
removed with the agent), on the same cgroup, /proc/stat and interface-counter readers as on one
host (:mod:`tierbench.measure.sampler`). It prints one JSON line per tick: the node's /proc/stat,
the CPU counters of the containers it was given (by PID on the node) and its interfaces'
counters. Ticks are aligned on the controller's clock: the controller sends ``t0`` (its time) and
the node's measured clock offset, and the agent samples at ``t0 + k`` seconds of the controller's
time, stamping each sample with the controller's time (its own clock less the offset). ``now``
asks for one sample at once, ``stop`` for a last one; the agent exits when its input closes (the
controller died: nothing is left running on the node).

On the controller, :class:`MergedSampler` runs one agent per node and merges tick k of every
node into one sample of the shape the single-host sampler writes (``t``, ``host``, ``cpu`` by
tier, ``net``), plus ``nodes`` (each node's own ``host`` and the time it sampled). ``host`` is
the sum over distinct kernels: nodes that share one (the lab's containers) count once.
"""

from __future__ import annotations

import bisect
import json
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tierbench import nodeapp
from tierbench.config.errors import TierbenchError
from tierbench.measure import sampler
from tierbench.transport import DidNotFinish, PIPE, Transport, TransportError

READY_TIMEOUT_S = 30.0
GRACE_S = 0.6  # how long after a tick the controller waits for late nodes before merging
BUNDLE_PARENT = "/tmp"  # where the node bundle's private folder is made on a node
BUNDLE_PREFIX = "tierbench-agent."
# what a node's sample carries beyond CPU, cgroups and interfaces, kept per node when merged
KERNEL_KEYS = ("cpus", "softirqs", "stack", "ethtool")


class AgentError(TierbenchError):
    """A node's sampling agent could not start or stopped; the message names the node."""


# ----------------------------------------------------------------------------- on the controller


def agent_argv(via: Transport, config: dict[str, Any]) -> list[str]:
    """The command that runs the sampling agent with ``config`` on the node ``via`` reaches:
    the node bundle put in a private folder there first (under BUNDLE_PARENT, removed when the
    agent ends); AgentError (why, without the node's name) when it cannot be put there."""
    try:
        folder = nodeapp.put(via, BUNDLE_PARENT, BUNDLE_PREFIX)
    except (TransportError, nodeapp.NotPut) as exc:
        raise AgentError(str(exc)) from None
    return nodeapp.run_argv("python3", folder, "sample", json.dumps(config))


class NodeStream:
    """One node's agent: ``command`` run on the node ``via`` reaches."""

    def __init__(self, node: str, via: Transport, command: str | Sequence[str]) -> None:
        self.node = node
        self.proc = via.popen(command, stdin=PIPE, stdout=PIPE,
                              stderr=PIPE, text=True, bufsize=1)
        self.ticks: dict[Any, dict[str, Any]] = {}
        self.ready: dict[str, Any] | None = None
        self.ended = threading.Event()
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, name=f"agent-{node}", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            with self.changed:
                if "ready" in obj:
                    self.ready = obj
                else:
                    self.ticks[obj["k"]] = obj
                self.changed.notify_all()
        with self.changed:
            self.ended.set()
            self.changed.notify_all()

    def wait_for(self, key: Any, deadline: float) -> dict[str, Any] | None:
        """The tick ``key`` ('ready', a number, 'now', 'final'), or None by the deadline."""
        with self.changed:
            while True:
                got = self.ready if key == "ready" else self.ticks.get(key)
                if got is not None or self.ended.is_set():
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.changed.wait(left)

    def take(self, key: Any) -> dict[str, Any] | None:
        with self.changed:
            return self.ticks.pop(key, None)

    def send(self, text: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(text + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def why(self) -> str:
        """The tail of the agent's stderr (after it ended)."""
        try:
            self.proc.wait(timeout=5)
        except DidNotFinish:
            return "no answer"
        err = self.proc.stderr.read() if self.proc.stderr else ""
        lines = [ln.strip() for ln in (err or "").splitlines() if ln.strip()]
        return " / ".join(lines[-2:]) or f"exit code {self.proc.returncode}"

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except DidNotFinish:
            self.proc.kill()
            self.proc.wait(timeout=10)


def merge(parts: dict[str, dict[str, Any]], tiers: dict[str, list[tuple[str, str]]],
          kernels: dict[str, str]) -> dict[str, Any]:
    """One sample from each node's sample of the same tick: ``tiers`` maps a tier to its
    (node, container label) parts; ``kernels`` a node to its boot id (host CPU counted once per
    kernel)."""
    out: dict[str, Any] = {"t": sum(p["t"] for p in parts.values()) / len(parts),
                           "host": {}, "cpu": {}, "net": {}, "nodes": {}}
    counted: set[str] = set()
    for node, p in parts.items():
        out["nodes"][node] = {"t": p["t"], "host": p["host"],
                              **{k: p[k] for k in KERNEL_KEYS if k in p}}
        kernel = kernels.get(node) or node
        if kernel not in counted:
            counted.add(kernel)
            for key, value in p["host"].items():
                out["host"][key] = out["host"].get(key, 0) + value
        out["net"].update(p.get("net", {}))
    for tier, members in tiers.items():
        found = {label: parts[node]["cpu"][label] for node, label in members
                 if node in parts and label in parts[node].get("cpu", {})}
        if len(found) != len(members):
            continue  # a part is missing (its container stopped, its node did not answer)
        if len(found) == 1:
            out["cpu"][tier] = next(iter(found.values()))
            continue
        total = {k: sum(v[k] for v in found.values()) for k in ("usage_s", "user_s", "system_s")}
        if all("read_bytes" in v for v in found.values()):
            total["read_bytes"] = sum(v["read_bytes"] for v in found.values())
        out["cpu"][tier] = {**total, "parts": {label: v["usage_s"] for label, v in found.items()}}
    missing = sorted({n for members in tiers.values() for n, _ in members} - set(parts))
    if missing:
        out["missing_nodes"] = missing
    return out


class MergedSampler:
    """Samples every node at 1 Hz (one agent each) and writes merged samples as JSON lines,
    with the interface of the single-host Sampler: start(), stop(), samples, error, sample()."""

    def __init__(self, out: Path, nodes: dict[str, dict[str, Any]],
                 tiers: dict[str, list[tuple[str, str]]], interval: float = 1.0,
                 probes: dict[str, Callable[[], dict]] | None = None) -> None:
        """``nodes``: name -> {"via": the node's transport, "offset": the node's clock
        offset in s, "containers": {label: pid}, "ifaces": {label: ifname}}; ``probes``: a
        kind's callables read on the controller with each merged sample, as Sampler's."""
        self.out, self.nodes, self.tiers, self.interval = out, nodes, tiers, interval
        self.probes = probes or {}
        self.samples: list[dict[str, Any]] = []
        self.error: str | None = None
        self.streams: dict[str, NodeStream] = {}
        self.kernels: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="merged-sampler", daemon=True)
        self._lock = threading.Lock()
        self.t0 = 0.0

    def start(self) -> MergedSampler:
        """Start every node's agent; returns once all sample (the first sample is at once)."""
        for name, spec in self.nodes.items():
            config = {"containers": spec["containers"], "ifaces": spec["ifaces"],
                      "interval": self.interval}
            try:
                command = agent_argv(spec["via"], config)
            except AgentError as exc:
                self._end_all()
                raise AgentError(f"{name}: the sampling agent did not start (python3 is needed "
                                 f"on every node): {exc}") from None
            self.streams[name] = NodeStream(name, spec["via"], command)
        deadline = time.monotonic() + READY_TIMEOUT_S
        for name, stream in self.streams.items():
            ready = stream.wait_for("ready", deadline)
            if ready is None:
                why = stream.why() if stream.ended.is_set() else \
                    f"no answer within {READY_TIMEOUT_S:g} s"
                self._end_all()
                raise AgentError(f"{name}: the sampling agent did not start (python3 is needed "
                                 f"on every node): {why}")
            self.kernels[name] = ready.get("boot_id", "")
            if ready.get("gone"):
                label, why = next(iter(ready["gone"].items()))
                self._end_all()
                raise AgentError(f"{name}: the CPU counters of {label} cannot be read: {why}")
        self.t0 = time.time() + 0.05
        for name, stream in self.streams.items():
            stream.send(f"t0 {self.t0:.6f} {self.nodes[name].get('offset', 0.0):.6f}")
        self._thread.start()
        return self

    def _merge_tick(self, key: Any, deadline: float) -> dict[str, Any] | None:
        """Every node's sample of tick ``key`` merged; None when a node that still runs missed
        it (a partial tick would sum part of the cluster), or, once stopping, ended before it
        (the final sample follows). A node whose agent ended during the run is left out, and
        the sampler's error names it."""
        parts: dict[str, Any] = {}
        late = False
        for name, stream in self.streams.items():
            got = stream.wait_for(key, deadline)
            if got is not None:
                parts[name] = stream.take(key)
            elif stream.ended.is_set() and self._stop.is_set() and key != "final":
                late = True  # stopping: an agent that sent its final sample is no gap to merge
            elif stream.ended.is_set():
                if self.error is None and not self._stop.is_set():
                    self.error = f"sampling stopped on {name}: {stream.why()}"
            else:
                late = True
        if not parts or late:
            return None
        merged = merge(parts, self.tiers, self.kernels)
        if self.probes:
            merged["probes"] = {name: probe() for name, probe in self.probes.items()}
        return merged

    def _loop(self) -> None:
        with self.out.open("a") as fh:
            k = 0
            while not self._stop.is_set():
                due = self.t0 + k * self.interval
                tick_deadline = time.monotonic() + max(0.0, due - time.time()) + GRACE_S
                merged = self._merge_tick(k, tick_deadline)
                if merged is not None:
                    with self._lock:
                        bisect.insort(self.samples, merged, key=lambda s: s["t"])
                        fh.write(json.dumps(merged) + "\n")
                        fh.flush()
                k += 1
                behind = int((time.time() - self.t0) / self.interval)
                if behind > k + 1:  # the controller stalled: drop what can no longer come
                    for stream in self.streams.values():
                        for old in range(k, behind):
                            stream.take(old)
                    k = behind
                if all(s.ended.is_set() for s in self.streams.values()):
                    return

    def sample(self) -> dict[str, Any]:
        """One merged sample now (every node's counters read at once)."""
        for stream in self.streams.values():
            stream.send("now")
        merged = self._merge_tick("now", time.monotonic() + 10)
        if merged is None:
            raise AgentError(self.error or "no node answered a sample request")
        return merged

    def now(self) -> dict[str, Any]:
        """Every counter read now (a stopped container's left out), as Sampler.now()."""
        return self.sample()

    def mark(self) -> dict[str, Any]:
        """A merged sample taken now and kept in time order with the ticks, as Sampler.mark()."""
        return sampler.keep_mark(self.sample(), self.samples, self._lock, self.out)

    def stop(self) -> list[dict[str, Any]]:
        """A last sample from every node, then end the agents; returns every sample."""
        if self._stop.is_set():
            return self.samples
        self._stop.set()
        for stream in self.streams.values():
            stream.send("stop")
        self._thread.join(timeout=self.interval + GRACE_S + 10)
        final = self._merge_tick("final", time.monotonic() + 10)
        if final is not None:
            self.samples.append(final)
            with self.out.open("a") as fh:
                fh.write(json.dumps(final) + "\n")
        self._end_all()
        return self.samples

    def _end_all(self) -> None:
        for stream in self.streams.values():
            stream.close()

