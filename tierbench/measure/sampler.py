"""1 Hz sampling of CPU per container (cgroup v1 cpuacct or v2 cpu.stat), the bytes its
processes read from storage (page-cache misses, /proc/PID/io) and its page cache and memory limit
(the memory controller's memory.stat and limit), of the host (/proc/stat), of
interface byte counters and of a kind's own probes (a server's cumulative counters, e.g. the
database's transactions), written as JSON lines of raw cumulative counters."""

from __future__ import annotations

import bisect
import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tierbench.cgroups import controller_path, folder, mountpoint
from tierbench.measure.kernel import cpu_lines, ethtool_stats, netns, softirqs, stack_counters

PROC_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
CLK_TCK = os.sysconf("SC_CLK_TCK")


class SamplerError(Exception):
    """A counter the sampler needs cannot be found."""


def disk_read_bytes(procs: Path, proc: Path = Path("/proc")) -> int | None:
    """Bytes the processes of a cgroup (its cgroup.procs) caused to be read from storage, from
    each one's /proc/PID/io read_bytes (page-cache misses and readahead; the blkio controller's
    counters stay at zero without a throttle limit on modern kernels). A process that exited
    takes its count with it; None where nothing can be read."""
    try:
        pids = procs.read_text().split()
    except OSError:
        return None
    total, seen = 0, False
    for pid in pids:
        try:
            text = (proc / pid / "io").read_text()
        except OSError:
            continue  # exited meanwhile, or not ours to read
        for line in text.splitlines():
            if line.startswith("read_bytes:"):
                total += int(line.split()[1])
                seen = True
    return total if seen else None


def memory_dir(lines: list[str]) -> tuple[int, Path] | None:
    """(cgroup version, folder) of the memory controller of a process, from its
    /proc/PID/cgroup lines; None where it cannot be found."""
    return folder(lines, "memory")


UNLIMITED = 1 << 62  # cgroup v1 reports "no limit" as a page-rounded 2^63 - 1


def memory_counters(found: tuple[int, Path] | None) -> dict[str, int]:
    """The cgroup's page cache ("file_bytes": memory.stat `file` in v2, `total_cache` in v1) and
    its memory limit ("mem_limit_bytes", left out when unlimited); {} where they cannot be read."""
    if found is None:
        return {}
    version, folder = found
    try:
        stat = dict(ln.split()[:2] for ln in (folder / "memory.stat").read_text().splitlines()
                    if len(ln.split()) >= 2)
        limit = (folder / ("memory.limit_in_bytes" if version == 1 else "memory.max")
                 ).read_text().strip()
    except OSError:
        return {}
    key = "total_cache" if version == 1 else "file"
    out = {"file_bytes": int(stat[key])} if key in stat else {}
    if limit.isdigit() and int(limit) < UNLIMITED:
        out["mem_limit_bytes"] = int(limit)
    return out


class CgroupCpu:
    """Cumulative CPU seconds (total, user, system) of the cgroup a process lives in, the
    bytes it read from block devices where the kernel counts them, and its page cache and
    memory limit now."""

    def __init__(self, pid: int) -> None:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        found = controller_path(lines, "cpuacct")
        if found is not None and found[0] == 1 and mountpoint("cgroup", "cpuacct") is None:
            raise SamplerError("cgroup v1 cpuacct is in use but not mounted")
        here = folder(lines, "cpuacct")
        if here is None:
            raise SamplerError(f"no cpuacct (v1) or cgroup2 hierarchy for pid {pid}")
        self.version, self.dir = here
        self.pid = pid
        self.memory = memory_dir(lines)
        self.read()  # fail now, not in the sampling thread

    def read(self) -> dict[str, float]:
        """{"usage_s", "user_s", "system_s"} since the cgroup was created, and "read_bytes"
        (block devices) where it can be read."""
        if self.version == 1:
            stat = dict(ln.split() for ln in (self.dir / "cpuacct.stat").read_text().splitlines())
            usage = int((self.dir / "cpuacct.usage").read_text()) / 1e9
            out = {"usage_s": usage, "user_s": int(stat["user"]) / CLK_TCK,
                   "system_s": int(stat["system"]) / CLK_TCK}
        else:
            stat = dict(ln.split() for ln in (self.dir / "cpu.stat").read_text().splitlines())
            out = {"usage_s": int(stat["usage_usec"]) / 1e6,
                   "user_s": int(stat["user_usec"]) / 1e6,
                   "system_s": int(stat["system_usec"]) / 1e6}
        read = disk_read_bytes(self.dir / "cgroup.procs")
        if read is not None:
            out["read_bytes"] = read
        out.update(memory_counters(self.memory))
        return out

    def cpus(self) -> str:
        """The cgroup's cpuset (e.g. '0-1'), or '' where it cannot be read."""
        mount = mountpoint("cgroup", "cpuset")
        candidates = []
        cpuacct = mountpoint("cgroup", "cpuacct")
        if self.version == 1 and mount is not None and cpuacct is not None:
            candidates.append(mount / self.dir.relative_to(cpuacct) / "cpuset.cpus")
        candidates += [self.dir / "cpuset.cpus.effective", self.dir / "cpuset.cpus"]
        for path in candidates:
            try:
                text = path.read_text().strip()
            except OSError:
                continue
            if text:
                return text
        return ""

    def pids(self) -> list[int]:
        """The process the counter was made for (its network namespace is the container's)."""
        return [self.pid]


class CgroupGroup:
    """Several containers counted as one tier (the Locust master and its worker containers,
    three web servers): read() sums their counters and adds each one's CPU seconds under
    "parts"."""

    def __init__(self, parts: Mapping[str, CgroupCpu | CgroupGroup]) -> None:
        self.parts = parts

    def read(self) -> dict:
        each = {name: cg.read() for name, cg in self.parts.items()}
        total = {k: sum(v[k] for v in each.values()) for k in ("usage_s", "user_s", "system_s")}
        # several web servers' storage reads, page caches and memory limits: the tier's
        for key in ("read_bytes", "file_bytes", "mem_limit_bytes"):
            if all(key in v for v in each.values()):
                total[key] = sum(v[key] for v in each.values())
        return {**total, "parts": {name: v["usage_s"] for name, v in each.items()}}

    def cpus(self) -> str:
        """The cpusets of the parts, comma-joined (as a cpuset list reads)."""
        return ",".join(dict.fromkeys(c for cg in self.parts.values() if (c := cg.cpus())))

    def pids(self) -> list[int]:
        """One process of each part."""
        return [pid for cg in self.parts.values() for pid in cg.pids()]


def host_cpu() -> dict[str, int]:
    """The aggregate `cpu` line of /proc/stat, in clock ticks."""
    with open("/proc/stat") as fh:
        values = fh.readline().split()[1:]
    return {k: int(v) for k, v in zip(PROC_STAT_FIELDS, values)}


def kernel_counters(ifaces: Mapping[str, str]) -> dict[str, Any]:
    """Each CPU's /proc/stat line ("cpus"), its NET_RX/NET_TX softirqs ("softirqs"), our
    namespace's protocol counters ("stack": {"host": ...}) and the driver statistics of the
    interfaces ``ifaces`` names ("ethtool": label -> counters, where the driver gives any)."""
    out: dict[str, Any] = {"cpus": cpu_lines(), "softirqs": softirqs(),
                           "stack": {"host": stack_counters(Path("/proc/net"))}}
    stats = {label: got for label, ifname in ifaces.items() if (got := ethtool_stats(ifname))}
    if stats:
        out["ethtool"] = stats
    return out


def tier_stacks(cgroups: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """Each tier's protocol and interface counters, summed over the distinct network namespaces
    of its containers; a tier in ours (host networking) is the host's, left out."""
    ours, out = netns(), {}
    for name, cg in cgroups.items():
        seen: set[str] = set()
        total: dict[str, int] = {}
        for pid in getattr(cg, "pids", list)():
            ns = netns(pid)
            if not ns or ns == ours or ns in seen:
                continue
            seen.add(ns)
            for key, value in stack_counters(Path(f"/proc/{pid}/net")).items():
                total[key] = total.get(key, 0) + value
        if total:
            out[name] = total
    return out


def iface_counters(ifname: str) -> dict[str, int]:
    """Byte and packet counters of a host-netns interface."""
    base = Path("/sys/class/net") / ifname / "statistics"
    return {k: int((base / k).read_text()) for k in ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets")}


def keep_mark(sample: dict, samples: list[dict], lock: threading.Lock, out: Path) -> dict:
    """Add a sample taken off the sampling thread to `samples` in time order, and to the JSON
    lines file `out`, under the lock the sampling thread also holds. It says "mark": windows
    use it, per-second series keep to the 1 Hz ticks (a mark would make a short interval)."""
    sample["mark"] = True
    with lock:
        bisect.insort(samples, sample, key=lambda s: s["t"])
        with out.open("a") as fh:
            fh.write(json.dumps(sample) + "\n")
    return sample


def marks_at(sampler: Any, instants: Sequence[float]) -> Callable[[], None]:
    """Call `sampler.mark()` at each wall-clock instant, from a thread, while the caller runs
    the load (a kind whose measured window is inside one blocking engine run); returns the
    function that cancels the marks not yet due and waits for one being taken."""
    cancel = threading.Event()

    def run() -> None:
        for at in instants:
            if cancel.wait(max(0.0, at - time.time())):
                return
            try:
                sampler.mark()
            except Exception:  # a mark is extra (the ticks and stop() decide): no traceback
                return

    thread = threading.Thread(target=run, name="marks", daemon=True)
    thread.start()

    def stop() -> None:
        cancel.set()
        thread.join(timeout=30)

    return stop


class Sampler:
    """Samples every second in a background thread; `stop()` takes a last sample and closes."""

    def __init__(self, out: Path, cgroups: Mapping[str, CgroupCpu | CgroupGroup],
                 ifaces: dict[str, str],
                 interval: float = 1.0,
                 probes: dict[str, Callable[[], dict]] | None = None) -> None:
        self.out, self.cgroups, self.ifaces, self.interval = out, cgroups, ifaces, interval
        # name -> a callable returning cumulative counters ({} when they cannot be read now);
        # it must answer well within the interval.
        self.probes = probes or {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sampler", daemon=True)
        self._lock = threading.Lock()  # the loop and mark() both add samples and write lines
        self.samples: list[dict] = []
        self.error: str | None = None

    def sample(self) -> dict:
        """One sample of every counter, stamped with the wall clock. A container that stopped
        took its cgroup with it: it is left out (listed under "gone") and sampling goes on, so
        a point during which a tier stops still counts what the others did."""
        cpu, gone = {}, []
        for name, cg in self.cgroups.items():
            try:
                cpu[name] = cg.read()
            except OSError:
                gone.append(name)
        sample: dict[str, Any] = {"t": time.time(), "host": host_cpu(), "cpu": cpu, "net": {}}
        if gone:
            sample["gone"] = gone
        for label, ifname in self.ifaces.items():
            try:
                sample["net"][label] = iface_counters(ifname)
            except OSError:
                pass  # the interface went away (container stopped); the summary notices
        sample.update(kernel_counters(self.ifaces))
        sample["stack"].update(tier_stacks(self.cgroups))
        if self.probes:
            sample["probes"] = {name: probe() for name, probe in self.probes.items()}
        return sample

    def now(self) -> dict:
        """Every counter read now (those that cannot be read, of a stopped container, left
        out) and the host's, stamped with the wall clock."""
        cpu = {}
        for name, cg in self.cgroups.items():
            try:
                cpu[name] = cg.read()
            except OSError:
                continue
        return {"t": time.time(), "host": host_cpu(), "cpu": cpu}

    def mark(self) -> dict:
        """A sample taken now on the caller's thread and kept in time order with the ticks.
        A kind marks the start and the middle of a measured window, so that the window holds
        two samples even when a loaded host delays the 1 Hz ticks by a second or more."""
        return keep_mark(self.sample(), self.samples, self._lock, self.out)

    def _loop(self) -> None:
        with self.out.open("a") as fh:
            deadline = time.monotonic()
            while True:
                try:
                    sample = self.sample()
                except OSError as exc:
                    self.error = f"sampling stopped: {exc}"
                    return
                with self._lock:
                    bisect.insort(self.samples, sample, key=lambda s: s["t"])
                    fh.write(json.dumps(sample) + "\n")
                    fh.flush()
                if self._stop.is_set():
                    return
                deadline += self.interval
                self._stop.wait(max(0.0, deadline - time.monotonic()))

    def start(self) -> Sampler:
        """Start sampling (the first sample is taken at once)."""
        self._thread.start()
        return self

    def stop(self) -> list[dict]:
        """Stop after one final sample; returns every sample taken."""
        self._stop.set()
        self._thread.join(timeout=10)
        return self.samples
