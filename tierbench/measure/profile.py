"""CPU by kernel category for every point (`tierbench run --profile categories`, issue 43):
perf samples every CPU's clock with call graphs while the point runs (its samples stamped with
the wall clock, so that the measured window selects them), each sample's call chain is mapped to
a category by the symbol table of categories.yml (read from the leaf: the function on CPU
decides, its callers when it is not listed), and each sample to the tier whose cgroup held its
process (else "other processes"). The point gets the categories' shares of the busy samples in
its window, the uncategorized share, categories.csv (tier x category) and perf-folded.txt
(folded stacks, one line per distinct chain, for a flame graph).

On a cluster (the tiers' counters carry their node's transport, ``via``: NodeCgroup) perf
records on every node that holds tiers instead, over one SSH session per node: perf record
until the session's input closes, then perf script's text back on its output and perf.data
removed there (NODE_SCRIPT). The tiers' processes on a node come from their containers'
cgroups read there (tierbench.measure.nodepids, from the node bundle), the node's samples are moved onto
the controller's clock (its measured offset) and categorised by the same code; categories.csv
then has a row per node, tier and category, and the summary columns count every node's samples.

The net kind's NET-txprofile (kinds/net/profile.py) samples the senders' CPUs with 001's own
categories; this module is the run-wide, every-kind profile.
"""

from __future__ import annotations

import csv
import os
import json
import re
import shlex
import shutil
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import yaml

from tierbench import nodeapp
from tierbench.config.errors import ConfigError
from tierbench.transport import (DEVNULL, LOCAL, PIPE, DidNotFinish, Process, Transport,
                                 TransportError, run_argv, start_argv)

TABLE_FILE = Path(__file__).with_name("categories.yml")
PROFILE_HZ = 499  # samples per second per CPU (a prime: not in step with 1 kHz timers)
MIN_FREE_BYTES = 512 << 20  # perf.data of a point is a few MB; refuse to start below this
NODE_READ_S = 2.0  # how often a node's tiers' processes are read during a point (over SSH)
USER, UNCATEGORIZED, IDLE = "user", "uncategorized", "idle"
OTHERS = "other processes"
CATEGORIES_FILE, FOLDED_FILE, DATA_FILE = "categories.csv", "perf-folded.txt", "perf.data"
HEADER = re.compile(r"^(?P<comm>.+?)\s+(?P<pid>-?\d+)(?:/(?P<tid>-?\d+))?\s+\[(?P<cpu>\d+)\]\s+"
                    r"(?P<t>\d+\.\d+):")
FRAME = re.compile(r"^\s+(?P<addr>[0-9a-f]+)\s+(?P<sym>.*?)\s+\((?P<dso>[^()]*)\)\s*$")


@dataclass
class Table:
    """categories.yml: frames passed over, and each category's symbol patterns, in order."""

    skip: list[str]
    categories: list[tuple[str, list[str]]]
    cache: dict[str, str | None] = field(default_factory=dict)

    def of_symbol(self, sym: str) -> str | None:
        """The category a kernel symbol names ('' for a frame passed over), None: none."""
        if sym not in self.cache:
            if any(fnmatchcase(sym, p) for p in self.skip):
                self.cache[sym] = ""
            else:
                self.cache[sym] = next((name for name, pats in self.categories
                                        if any(fnmatchcase(sym, p) for p in pats)), None)
        return self.cache[sym]

    def names(self) -> list[str]:
        """Every category a busy sample can get, in report order."""
        return [n for n, _ in self.categories if n != IDLE] + [USER, UNCATEGORIZED]


def load_table(path: Path = TABLE_FILE) -> Table:
    """The symbol-to-category table (a broken file is refused in one sentence)."""
    try:
        data = yaml.safe_load(path.read_text())
        cats = [(str(name), [str(p) for p in pats]) for name, pats in data["categories"].items()]
        return Table([str(p) for p in data.get("skip") or []], cats)
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{path}: the category table cannot be read ({exc})") from None


@dataclass
class Sample:
    """One perf sample: its process, CPU, wall-clock time and call chain (leaf first:
    (symbol, in the kernel?))."""

    comm: str
    pid: int
    cpu: int
    t: float
    frames: list[tuple[str, bool]]


def parse_script(text: str) -> Iterator[Sample]:
    """perf script's output (-F comm,pid,tid,cpu,time,ip,sym,dso; call chains) sample by
    sample."""
    current: Sample | None = None
    for line in text.splitlines():
        if not line.strip():
            if current is not None:
                yield current
            current = None
            continue
        head = HEADER.match(line) if not line[:1].isspace() else None
        if head:
            if current is not None:
                yield current
            current = Sample(head["comm"], int(head["pid"]), int(head["cpu"]), float(head["t"]),
                             [])
            continue
        frame = FRAME.match(line)
        if frame and current is not None:
            sym = re.sub(r"\+0x[0-9a-f]+$", "", frame["sym"])
            current.frames.append((sym, frame["dso"] == "[kernel.kallsyms]"
                                   or frame["addr"].startswith("ffff")))
    if current is not None:
        yield current


def categorize(sample: Sample, table: Table) -> str:
    """The sample's category: from its leaf towards the root, the first kernel frame the table
    names; user space reached first: USER; nothing named: UNCATEGORIZED."""
    for sym, kernel in sample.frames:
        if not kernel:
            return USER
        found = table.of_symbol(sym)
        if found:
            return found
    return UNCATEGORIZED


def tier_pids(counters: Mapping[str, Any]) -> dict[int, str]:
    """PID -> tier, from each tier's cgroup(s) (cgroup.procs), read now."""
    out: dict[int, str] = {}
    for tier, cg in counters.items():
        parts = list(cg.parts.values()) if hasattr(cg, "parts") else [cg]
        for part in parts:
            try:
                pids = (Path(part.dir) / "cgroup.procs").read_text().split()
            except (OSError, AttributeError):
                continue
            out.update({int(p): tier for p in pids})
    return out


def breakdown(samples: list[Sample], table: Table, tiers: Mapping[int, str],
              span: tuple[float, float] | None) -> tuple[dict[str, Any], list[dict[str, Any]],
                                                         Counter[str]]:
    """Summary columns (cat_samples, cat_idle_pct, cat_<category>_pct of the busy samples,
    cat_uncategorized_pct; the tiers' own: cat_tiers_samples, the CPU seconds they stand for,
    cat_tiers_cpu_s, and cat_tiers_<category>_pct of them, without other processes'),
    categories.csv's rows (node, tier, category, samples, % of the busy samples) and the folded
    stacks, over the window ``span`` (all samples without one)."""
    return breakdown_nodes({"": (samples, tiers)}, table, span)


def breakdown_nodes(per_node: Mapping[str, tuple[list[Sample], Mapping[int, str]]],
                    table: Table, span: tuple[float, float] | None
                    ) -> tuple[dict[str, Any], list[dict[str, Any]], Counter[str]]:
    """breakdown() over several nodes' samples, each with its own PID -> tier map ('' names
    this host): the columns count them all, the rows are per node and tier."""
    by: Counter[tuple[str, str, str]] = Counter()
    folded: Counter[str] = Counter()
    idle = inside = 0
    for node, (samples, tiers) in per_node.items():
        for s in samples:
            if span is not None and not span[0] <= s.t <= span[1]:
                continue
            inside += 1
            cat = categorize(s, table)
            if cat == IDLE:
                idle += 1
                continue
            by[(node, tiers.get(s.pid, OTHERS), cat)] += 1
            folded[";".join(([node] if node else []) + [s.comm]
                            + [sym for sym, _ in reversed(s.frames)])] += 1
    busy = sum(by.values())
    mine = sum(v for (_, t, _), v in by.items() if t != OTHERS)
    out: dict[str, Any] = {"cat_samples": busy,
                           "cat_idle_pct": 100.0 * idle / inside if inside else None,
                           "cat_tiers_samples": mine, "cat_tiers_cpu_s": mine / PROFILE_HZ}
    for name in table.names():
        n = sum(v for (_, _, c), v in by.items() if c == name)
        out[f"cat_{slug(name)}_pct"] = 100.0 * n / busy if busy else None
    for name in table.names():
        n = sum(v for (_, t, c), v in by.items() if c == name and t != OTHERS)
        out[f"cat_tiers_{slug(name)}_pct"] = 100.0 * n / mine if mine else None
    rows = [{"node": node, "tier": tier, "category": cat, "samples": n,
             "pct_of_busy": round(100.0 * n / busy, 3)}
            for (node, tier, cat), n in sorted(by.items())]
    return out, rows, folded


def slug(name: str) -> str:
    """A category's name as part of a column name ('data copy' -> 'data_copy')."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


# ---------------------------------------------------------------------------- perf itself


# What check() runs (here, or on a node): perf's presence and a 0.1 s recording of every CPU's
# clock (its first error line, kept in a private folder).
PROBE = ('command -v perf >/dev/null 2>&1 || { echo NO-PERF; exit 0; }; d=$(mktemp -d) || exit 1; '
         'perf record -q -e cpu-clock -a -g -o /dev/null -- sleep 0.1 >/dev/null 2>"$d/err" '
         '&& echo RECORD-OK || { echo RECORD-FAILED; head -n 1 "$d/err"; }; rm -rf "$d"')


def check(via: Transport = LOCAL) -> None:
    """Refuse, in one sentence, a profile this host (or the node ``via`` reaches) cannot take:
    no perf, or perf that cannot sample every CPU's clock."""
    where = f"node {via.name}" if via.remote else "this host"
    try:
        lines = via.run(PROBE, timeout=60).stdout.splitlines()
    except TransportError as exc:
        raise ConfigError(f"--profile categories: perf could not be tried on {where} ({exc}); "
                          "nothing was run") from None
    if not lines or lines[0].strip() != "RECORD-OK":
        if not lines or lines[0].strip() == "NO-PERF":
            raise ConfigError(f"--profile categories needs perf on {where} (Debian and Ubuntu: "
                              "apt-get install linux-perf, setup/host-tools.sh); nothing was run")
        why = (lines[1].strip() if len(lines) > 1 else "no reason given")[:200]
        raise ConfigError(f"--profile categories: perf cannot sample every CPU on {where} "
                          f"({why}); run as root with kernel.perf_event_paranoid <= 1; nothing "
                          "was run")


def start(folder: Path) -> Process | None:
    """perf record of every CPU's clock with call graphs, stamped with the wall clock, into
    the point's folder, until stop(); None when the folder's file system has under
    MIN_FREE_BYTES free (the point then has no profile, and says so)."""
    if shutil.disk_usage(folder).free < MIN_FREE_BYTES:
        return None
    return start_argv(["perf", "record", "-q", "-e", "cpu-clock", "-F", str(PROFILE_HZ),
                       "-a", "-g", "-k", "CLOCK_REALTIME", "-o", str(folder / DATA_FILE)],
                      stdout=DEVNULL, stderr=DEVNULL)


def cpu_seconds(pid: int) -> float | None:
    """The CPU time (user + system) process ``pid`` has used, from /proc (None: gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop(proc: Process, folder: Path, tiers: Mapping[int, str],
         span: tuple[float, float] | None, table: Table | None = None,
         started: float | None = None) -> dict[str, Any]:
    """End perf record, read its samples, and give the point's category columns (writing
    categories.csv and perf-folded.txt; perf.data removed); ``tiers``: PID -> tier. With
    ``started`` (the recording's start, time.monotonic()), also cat_perf_cpu_pct: perf
    record's own CPU time as % of one CPU over the recording (what sampling took from the
    point, besides the interrupts that take the samples)."""
    own = cpu_seconds(proc.pid)
    took = time.monotonic() - started if started is not None else None
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except DidNotFinish:
        proc.kill()
        proc.wait(timeout=10)
    data = folder / DATA_FILE
    try:
        done = run_argv(["perf", "script", "-i", str(data), "-F",
                         "comm,pid,tid,cpu,time,ip,sym,dso"], timeout=600)
    finally:
        data.unlink(missing_ok=True)
    columns = written(folder, breakdown(list(parse_script(done.stdout)),
                                        table or load_table(), tiers, span))
    if own is not None and took:
        columns["cat_perf_cpu_pct"] = round(100.0 * own / took, 3)
    return columns


def written(folder: Path, found: tuple[dict[str, Any], list[dict[str, Any]], Counter[str]]
            ) -> dict[str, Any]:
    """Write a breakdown's categories.csv and perf-folded.txt into ``folder``; its columns."""
    columns, rows, folded = found
    with (folder / CATEGORIES_FILE).open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["node", "tier", "category", "samples",
                                                "pct_of_busy"])
        writer.writeheader()
        writer.writerows(rows)
    (folder / FOLDED_FILE).write_text("".join(f"{k} {v}\n" for k, v in folded.items()))
    return columns


# ---------------------------------------------------------------------------- on cluster nodes

# What a node runs for a point, over one SSH session: perf record of every CPU until the
# session's input closes (its workload, cat, reads that input), then perf script's text on the
# session's output; perf.data lives in a private folder (mktemp -d) removed at the end. A node
# with under MIN_FREE_BYTES there, or whose perf fails, says why in one line on stderr.
NODE_SCRIPT = (
    'd=$(mktemp -d) || exit 1; trap \'rm -rf "$d"\' EXIT; '
    f'[ "$(df -Pk "$d" | awk \'NR==2 {{print $4}}\')" -ge {MIN_FREE_BYTES >> 10} ] '
    f'|| {{ echo "under {MIN_FREE_BYTES >> 20} MB free for perf.data" >&2; exit 0; }}; '
    + shlex.join(["perf", "record", "-q", "-e", "cpu-clock", "-F", str(PROFILE_HZ), "-a", "-g",
                  "-k", "CLOCK_REALTIME", "-o"])
    + f' "$d/{DATA_FILE}" -- cat >/dev/null 2>"$d/err" '
    '|| { echo "perf record failed: $(head -n 1 "$d/err")" >&2; exit 0; }; '
    + shlex.join(["perf", "script", "-F", "comm,pid,tid,cpu,time,ip,sym,dso", "-i"])
    + f' "$d/{DATA_FILE}" 2>/dev/null')

@dataclass
class Node:
    """A cluster node holding tiers: how it is reached, its clock's offset from the
    controller's (its time less the controller's), its tiers' main processes (tier, PID
    there), and meanwhile its perf session and the processes read there (PID -> tier)."""

    name: str
    via: Transport
    offset: float
    mains: list[tuple[str, int]]
    session: Process | None = None
    tiers: dict[int, str] = field(default_factory=dict)
    problem: str | None = None

    def read_pids(self) -> None:
        """Add the processes now in the node's tiers' cgroups (a failed read adds none)."""
        try:
            done = self.via.run(nodeapp.oneshot_argv("python3", "/tmp", "tierbench-pids.", "pids",
                                                     json.dumps(self.mains)),
                                input=nodeapp.bundle(), text=False, timeout=30)
            found = json.loads(done.stdout) if done.returncode == 0 else {}
        except (TransportError, ValueError):
            return
        self.tiers.update({int(p): str(t) for p, t in found.items()})

    def start(self) -> None:
        """perf record there, until stop()."""
        self.session = self.via.popen(NODE_SCRIPT, stdin=PIPE, stdout=PIPE, stderr=PIPE,
                                      text=True)

    def stop(self) -> list[Sample]:
        """End perf record there and read its samples back, on the controller's clock (none,
        and ``problem`` set, when the node could not profile)."""
        if self.session is None:
            return []
        proc, self.session = self.session, None
        try:
            out, err = proc.communicate(timeout=600)  # closes its input: perf record ends
        except DidNotFinish:
            proc.kill()
            proc.communicate(timeout=10)
            self.problem = f"{self.name}: perf script did not finish within 600 s"
            return []
        if not out.strip():
            self.problem = f"{self.name}: {(err.strip().splitlines() or ['no samples'])[-1]}"
        samples = list(parse_script(out))
        for s in samples:
            s.t -= self.offset
        return samples

    def kill(self) -> None:
        """The point failed: end the session (the node removes its folder)."""
        if self.session is not None:
            self.session.kill()
            self.session.wait(timeout=10)
            self.session = None


def cluster_nodes(counters: Mapping[str, Any]) -> dict[str, Node]:
    """The nodes the tiers' counters name (those that carry a transport, ``via``), each with
    its tiers' main processes; {} on one host."""
    out: dict[str, Node] = {}
    for tier, cg in counters.items():
        for part in list(cg.parts.values()) if hasattr(cg, "parts") else [cg]:
            via = getattr(part, "via", None)
            if via is None:
                continue
            node = out.setdefault(part.node, Node(part.node, via,
                                                  float(getattr(part, "offset", 0.0)), []))
            node.mains.append((tier, int(part.pid)))
    return out


class Recording:
    """perf record around one point (``with Recording(folder, on, counters) as rec:``):
    started on entry when ``on``, here or, for the tiers of a cluster, on each node that holds
    them; ended and removed on an exception; ``rec.finish(...)`` gives the columns. The tiers'
    processes are read every second meanwhile (a load generator's process may end with the
    point, before perf's samples are read); on nodes, every NODE_READ_S."""

    def __init__(self, folder: Path, on: bool, counters: Mapping[str, Any] | None = None
                 ) -> None:
        self.folder, self.on, self.counters = folder, on, counters or {}
        self.nodes = cluster_nodes(self.counters)
        self.proc: Process | None = None
        self.started: float | None = None
        self.tiers: dict[int, str] = {}
        self.done = threading.Event()
        self.watch = threading.Thread(target=self._watch, name="profile-pids", daemon=True)

    def _read_pids(self) -> None:
        if self.nodes:
            for node in self.nodes.values():
                node.read_pids()
        else:
            self.tiers.update(tier_pids(self.counters))

    def _watch(self) -> None:
        while True:
            self._read_pids()
            if self.done.wait(NODE_READ_S if self.nodes else 1.0):
                return

    def __enter__(self) -> Recording:
        if self.on:
            self.started = time.monotonic()
            if self.nodes:
                for node in self.nodes.values():
                    node.start()
            else:
                self.proc = start(self.folder)
            self.watch.start()
        return self

    def finish(self, span: tuple[float, float] | None) -> dict[str, Any]:
        """The category columns ({} when off; cat_samples 0 and a note when perf could not
        start for want of space, or a node could not profile)."""
        if not self.on:
            return {}
        if self.nodes:
            return self._finish_nodes(span)
        if self.proc is None:
            return {"cat_samples": 0, "cat_note": "no profile: under "
                    f"{MIN_FREE_BYTES >> 20} MB free for perf.data"}
        proc, self.proc = self.proc, None
        self._end_watch()
        return stop(proc, self.folder, self.tiers, span, started=self.started)

    def _finish_nodes(self, span: tuple[float, float] | None) -> dict[str, Any]:
        samples = {name: node.stop() for name, node in self.nodes.items()}
        self._end_watch()
        columns = written(self.folder, breakdown_nodes(
            {name: (samples[name], node.tiers) for name, node in self.nodes.items()},
            load_table(), span))
        columns["cat_nodes"] = " ".join(self.nodes)
        problems = [n.problem for n in self.nodes.values() if n.problem]
        if problems:
            columns["cat_note"] = "no profile from " + "; ".join(problems)
        return columns

    def _end_watch(self) -> None:
        if self.watch.is_alive():
            self.done.set()
            self.watch.join(timeout=60)
        self._read_pids()

    def __exit__(self, *exc: object) -> None:
        if self.watch.is_alive():
            self._end_watch()
        for node in self.nodes.values():
            node.kill()
        if self.proc is not None:  # the point failed before finish(): no profile
            self.proc.kill()
            self.proc.wait(timeout=10)
            (self.folder / DATA_FILE).unlink(missing_ok=True)
