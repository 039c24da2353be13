"""CPU by kernel category for every point (`tierbench run --profile categories`, issue 43):
perf samples every CPU's clock with call graphs while the point runs (its samples stamped with
the wall clock, so that the measured window selects them), each sample's call chain is mapped to
a category by the symbol table of categories.yml (read from the leaf: the function on CPU
decides, its callers when it is not listed), and each sample to the tier whose cgroup held its
process (else "other processes"). The point gets the categories' shares of the busy samples in
its window, the uncategorized share, categories.csv (tier x category) and perf-folded.txt
(folded stacks, one line per distinct chain, for a flame graph). On one host only for now.

The net kind's NET-txprofile (kinds/net/profile.py) samples the senders' CPUs with 001's own
categories; this module is the run-wide, every-kind profile.
"""

from __future__ import annotations

import csv
import os
import re
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

from tierbench.config.errors import ConfigError
from tierbench.transport import DEVNULL, DidNotFinish, Process, run_argv, start_argv

TABLE_FILE = Path(__file__).with_name("categories.yml")
PROFILE_HZ = 499  # samples per second per CPU (a prime: not in step with 1 kHz timers)
MIN_FREE_BYTES = 512 << 20  # perf.data of a point is a few MB; refuse to start below this
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
    categories.csv's rows (tier, category, samples, % of the busy samples) and the folded
    stacks, over the window ``span`` (all samples without one)."""
    inside = [s for s in samples if span is None or span[0] <= s.t <= span[1]]
    by: Counter[tuple[str, str]] = Counter()
    folded: Counter[str] = Counter()
    idle = 0
    for s in inside:
        cat = categorize(s, table)
        if cat == IDLE:
            idle += 1
            continue
        by[(tiers.get(s.pid, OTHERS), cat)] += 1
        folded[";".join([s.comm] + [sym for sym, _ in reversed(s.frames)])] += 1
    busy = sum(by.values())
    mine = sum(v for (t, _), v in by.items() if t != OTHERS)
    out: dict[str, Any] = {"cat_samples": busy,
                           "cat_idle_pct": 100.0 * idle / len(inside) if inside else None,
                           "cat_tiers_samples": mine, "cat_tiers_cpu_s": mine / PROFILE_HZ}
    for name in table.names():
        n = sum(v for (_, c), v in by.items() if c == name)
        out[f"cat_{slug(name)}_pct"] = 100.0 * n / busy if busy else None
    for name in table.names():
        n = sum(v for (t, c), v in by.items() if c == name and t != OTHERS)
        out[f"cat_tiers_{slug(name)}_pct"] = 100.0 * n / mine if mine else None
    rows = [{"tier": tier, "category": cat, "samples": n,
             "pct_of_busy": round(100.0 * n / busy, 3)} for (tier, cat), n in sorted(by.items())]
    return out, rows, folded


def slug(name: str) -> str:
    """A category's name as part of a column name ('data copy' -> 'data_copy')."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


# ---------------------------------------------------------------------------- perf itself


def check() -> None:
    """Refuse, in one sentence, a profile this host cannot take: no perf, or perf that cannot
    sample every CPU's clock."""
    if shutil.which("perf") is None:
        raise ConfigError("--profile categories needs perf on this host (Debian and Ubuntu: "
                          "apt-get install linux-perf, setup/host-tools.sh); nothing was run")
    done = run_argv(["perf", "record", "-q", "-e", "cpu-clock", "-a", "-g", "-o",
                     "/dev/null", "--", "sleep", "0.1"], timeout=60)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no reason given"])[0][:200]
        raise ConfigError(f"--profile categories: perf cannot sample every CPU here ({why}); "
                          "run as root with kernel.perf_event_paranoid <= 1; nothing was run")


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
    columns, rows, folded = breakdown(list(parse_script(done.stdout)), table or load_table(),
                                      tiers, span)
    if own is not None and took:
        columns["cat_perf_cpu_pct"] = round(100.0 * own / took, 3)
    with (folder / CATEGORIES_FILE).open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["tier", "category", "samples", "pct_of_busy"])
        writer.writeheader()
        writer.writerows(rows)
    (folder / FOLDED_FILE).write_text("".join(f"{k} {v}\n" for k, v in folded.items()))
    return columns


class Recording:
    """perf record around one point (``with Recording(folder, on, counters) as rec:``):
    started on entry when ``on``, ended and removed on an exception; ``rec.finish(...)`` gives
    the columns. The tiers' processes are read every second meanwhile (a load generator's
    process may end with the point, before perf's samples are read)."""

    def __init__(self, folder: Path, on: bool, counters: Mapping[str, Any] | None = None
                 ) -> None:
        self.folder, self.on, self.counters = folder, on, counters or {}
        self.proc: Process | None = None
        self.started: float | None = None
        self.tiers: dict[int, str] = {}
        self.done = threading.Event()
        self.watch = threading.Thread(target=self._watch, name="profile-pids", daemon=True)

    def _watch(self) -> None:
        while True:
            self.tiers.update(tier_pids(self.counters))
            if self.done.wait(1.0):
                return

    def __enter__(self) -> Recording:
        if self.on:
            self.started = time.monotonic()
            self.proc = start(self.folder)
            self.watch.start()
        return self

    def finish(self, span: tuple[float, float] | None) -> dict[str, Any]:
        """The category columns ({} when off; cat_samples 0 and a note when perf could not
        start for want of space)."""
        if not self.on:
            return {}
        if self.proc is None:
            return {"cat_samples": 0, "cat_note": "no profile: under "
                    f"{MIN_FREE_BYTES >> 20} MB free for perf.data"}
        proc, self.proc = self.proc, None
        self._end_watch()
        return stop(proc, self.folder, self.tiers, span, started=self.started)

    def _end_watch(self) -> None:
        if self.watch.is_alive():
            self.done.set()
            self.watch.join(timeout=10)
        self.tiers.update(tier_pids(self.counters))

    def __exit__(self, *exc: object) -> None:
        if self.on:
            self._end_watch()
        if self.proc is not None:  # the point failed before finish(): no profile
            self.proc.kill()
            self.proc.wait(timeout=10)
            (self.folder / DATA_FILE).unlink(missing_ok=True)
