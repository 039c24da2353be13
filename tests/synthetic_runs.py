"""Small synthetic runs in the results layout, one per report family (tierbench/kinds/families/),
for the analysis tests.

Written with the csv module only (the analysis reads result files, so its tests make them
without the runner). Rows are written in a shuffled order, as a real run's summary is, so that
tests can check that tables and figures follow the experiment's order, not the run order. Each
run's report spec is its family file with the order its synthetic experiment gives (`ORDERS`),
as a kind adds it.
"""

from __future__ import annotations

import csv
import json
import random
import re
from pathlib import Path
from typing import Any

from tierbench.kinds import families

FAMILIES = families.names()
# the order of the factors in each synthetic experiment's file, where it is not the run's
ORDERS: dict[str, dict[str, list[Any]]] = {
    "dc-single": {"trace": ["single-2k", "single-4k", "single-6k", "single-8k", "single-10k"]},
    "dc-zipf": {"trace": ["zipf-0.95", "zipf-0.9", "zipf-0.75", "zipf-0.5"]},
    "net-csum-dc": {"trace": ["single-4k", "single-16k", "single-64k"]},
    "dc-classes": {"trace": ["class-0", "class-1", "class-2", "class-3", "class-4"],
                   "docroot": ["tmpfs", "ide", "orangefs"]},
    "dc-hybrid": {"trace": ["bg-class-1", "bg-class-2"],
                  "docroot": ["ide", "ide+hot-tmpfs", "orangefs", "orangefs+hot-tmpfs"]},
    "dc-cache-hit": {"trace": [f"{s}-hit{h}" for s in ("4k", "64k", "1m") for h in (100, 50, 0)],
                     "docroot": ["ide", "scsi", "raid0"]},
    "dc-disk-file": {"trace": [f"{s}-{c}" for s in ("4k", "64k", "1m", "4m")
                               for c in ("cached", "uncached")],
                     "docroot": ["ide", "scsi", "raid0"]},
    "dc-disk-classes": {"trace": ["class-0", "class-1", "class-2", "class-3"], "users": [1, 64],
                        "docroot": ["ide", "scsi", "raid0"]},
    "dc-placement": {"trace": ["class-1", "class-3"],
                     "placement": ["single-disk", "random", "popularity", "size", "raid-single",
                                   "raid"]},
    "dc-disk-basic": {"system": ["ide", "scsi", "raid0"]},
    "pfs-basic": {"filesystem": ["tmpfs", "disk", "orangefs", "orangefs-native"]},
    "net-streams": {"connections": [1, 4, 16, 60, 120]},
    "net-conns": {"connections": [1, 100, 6000], "write_size": [1024, 65536]},
    "net-csum": {"write_size": [16384, 65536]},
    "net-bw": {"receivers": [1, 2, 4, 6], "direction": ["uni", "bi"]},
    "net-msgsize": {"write_size": [16384, 65536, 1048576]},
    "net-latency": {"clients": [1, 2, 3, 4, 5, 6]},
    "net-platform": {"message_size": [14, 256, 1024, 4096, 16384, 65536]},
    "net-platform-bw": {"write_size": [1024, 4096, 16384, 65536, 262144]},
    "net-b2b": {"write_size": [16384, 65536]},
    "net-b2b-rr": {"message_size": [14, 64, 1024, 16384, 65536]},
    "net-sockopt": {"direction": ["uni", "bi"],
                    "case": ["sockopt-1-default", "sockopt-2-socket-buffers", "sockopt-3-tso",
                             "sockopt-4-jumbo"]},
    "net-txprofile": {"connections": [100, 4000], "write_size": [8192, 65536]},
    "net-dmacopy": {"message_size": [1024, 4096, 8192, 16384, 65536]},
    "pfs-profile": {"clients": [1, 2, 3, 4, 5, 6]},
}
WEB_BASE: dict[str, Any] = {
    "repetition": 1, "engine": "locust", "users": 16, "window_s": 3.0, "requests": 300,
    "tps": 100.0, "p50_ms": 5.0, "p99_ms": 20.0, "errors": 0, "cpu_s_loadgen": 1.0,
    "cpu_s_proxy": 0.5, "cpu_s_web": 0.5, "cpu_s_servers": 1.0, "host_usr_pct": 40.0,
    "host_sys_pct": 20.0, "host_irq_pct": 0.0, "host_softirq_pct": 5.0, "host_iowait_pct": 0.0,
    "host_steal_pct": 0.0, "host_idle_pct": 35.0, "host_unattributed_cpu_s": 0.1,
    "generator_cpu_pct": 50.0, "bytes_moved": 1024 * 300, "mb_per_s": 0.1,
    "server_cpu_us_per_req": 3333.3, "server_cpu_us_per_kb": 3333.3,
    "host_cpu_us_per_kb": 5000.0, "client_bound": False,
}
DISKS = ("ide", "scsi", "raid0")
PFS_PHASE = ("mb_per_s", "bytes", "s", "client_cpu_s", "server_cpu_s", "client_cpu_pct",
             "server_cpu_pct", "client_cpu_us_per_kb", "server_cpu_us_per_kb", "host_usr_pct",
             "host_sys_pct", "host_softirq_pct", "host_idle_pct", "failed_streams")


ON_OFF = ["offloads-on", "offloads-off"]
PLATFORMS = ["platform-2400mhz", "platform-1000mhz", "platform-700mhz"]
SERVERS_ON_OFF = ["servers-offloads-on", "servers-offloads-off"]
SERVER_PLATFORMS = ["servers-1cpu", "servers-2cpus-half", "servers-2cpus"]
# the platform rows' two factors: a CPU platform and offloads on the servers (a+b modes)
PLATFORMS_ON_OFF = [f"{p}+servers-offloads-{s}" for s in ("on", "off") for p in SERVER_PLATFORMS]
PLATFORMS_CACHE = [*(f"{p}+proxy-cache-on" for p in SERVER_PLATFORMS),
                   "servers-1cpu+proxy-cache-off"]
# family -> the first measured panel of its synthetic run's figure: kind, categories (tick
# labels in order), series names
FIRST_PANEL = {
    "dc-single": ("bars", ["single-2k", "single-4k", "single-6k", "single-8k", "single-10k"],
                  ON_OFF),
    "dc-worldcup": ("bars", ["wc98-day46"], PLATFORMS_ON_OFF),
    "dc-zipf": ("lines", ["0.5", "0.75", "0.9", "0.95"], ON_OFF),
    "latency-at-load": ("lines", ["100", "400", "800", "1,600"], ON_OFF),
    "dc-clients": ("lines", ["1", "4", "16", "64", "256"], ON_OFF),
    "dc-classes": ("bars", [f"class-{c}" for c in range(5)], ["tmpfs", "ide", "orangefs"]),
    "dc-hybrid": ("bars", ["bg-class-1", "bg-class-2"],
                  ["ide", "ide+hot-tmpfs", "orangefs", "orangefs+hot-tmpfs"]),
    "pfs-concurrent": ("lines", ["1", "2", "4", "6"],
                       [f"N={n} · {m}" for n in (5, 6) for m in ON_OFF]),
    "pfs-streams": ("lines", ["1", "2", "4", "8", "16", "32", "64"], ON_OFF),
    "pfs-basic": ("lines", ["4,096", "65,536", "1,048,576"],
                  [f"{fs} · offloads-on" for fs in ("tmpfs", "disk", "orangefs",
                                                     "orangefs-native")]),
    "net-conns": ("lines", ["1", "100", "6,000"],
                  [f"{w} B writes · {m}" for w in (1024, 65536) for m in ON_OFF]),
    "dc-static": ("lines", ["1,024", "8,192", "65,536", "262,144"],
                  ["servers-1cpu", "servers-2cpus-half", "servers-2cpus"]),
    "dc-alpha-cache": ("lines", ["0.5", "0.75", "0.9", "0.99"], PLATFORMS_CACHE),
    "dc-cache-hit": ("lines", ["0", "0.5", "1"], ["ide", "scsi", "raid0"]),
    "dc-disk-file": ("lines", ["4,096", "65,536", "1,048,576", "4,194,304"],
                     ["ide", "scsi", "raid0"]),
    "dc-disk-classes": ("bars", [f"class-{c}" for c in range(4)], ["ide", "scsi", "raid0"]),
    "dc-placement": ("bars", ["single-disk", "random", "popularity", "size", "raid-single",
                              "raid"], ["offloads-on"]),
    "dc-disk-basic": ("bars", ["ide", "scsi", "raid0"], ["offloads-on"]),
    # static and dynamic content (the summary's `content` column) per mode, by size
    "dc-dynamic": ("lines", ["4,096", "65,536", "262,144"],
                   [f"{c} · {m}" for c in ("static", "dynamic") for m in PLATFORMS_ON_OFF]),
    # one line per trace over the CPUs the modes give: the x column holds the mode
    "dc-cpus": ("lines", ["1", "2"], ["static-4k", "static-1m", "dynamic-4k", "dynamic-1m"]),
    "net-streams": ("lines", ["1", "4", "16", "60", "120"], ON_OFF),
    "net-latency": ("lines", ["1", "2", "3", "4", "5", "6"], ON_OFF),
    "net-platform": ("lines", ["14", "256", "1,024", "4,096", "16,384", "65,536"], PLATFORMS),
    "net-platform-bw": ("lines", ["1,024", "4,096", "16,384", "65,536", "262,144"], PLATFORMS),
    "net-b2b": ("bars", ["16384", "65536"], ON_OFF),
    "net-b2b-rr": ("lines", ["14", "64", "1,024", "16,384", "65,536"], ON_OFF),
    "net-sockopt": ("bars", ["sockopt-1-default", "sockopt-2-socket-buffers", "sockopt-3-tso",
                             "sockopt-4-jumbo"], ["gro-on", "gro-off"]),
    "net-txprofile": ("bars", ["100", "4000"], [f"{w} B writes · offloads-on"
                                                 for w in (8192, 65536)]),
    "pfs-profile": ("lines", ["1", "2", "3", "4", "5", "6"], ON_OFF),
    "net-dmacopy": ("lines", ["1,024", "4,096", "8,192", "16,384", "65,536"], ["offloads-on"]),
    "net-bw": ("lines", ["1", "2", "4", "6"],
               ["uni · offloads-on", "uni · offloads-off", "bi · offloads-on",
                "bi · offloads-off"]),
    "net-msgsize": ("lines", ["16,384", "65,536", "1,048,576"], ON_OFF),
    "net-csum": ("bars", ["16384", "65536"], ["checksum-on-tso-off", "checksum-off-tso-off"]),
    "net-csum-dc": ("lines", ["4,096", "16,384", "65,536"],
                    ["checksum-on-tso-off", "checksum-off-tso-off"]),
    "fs-thinktime": ("lines", ["0", "0.5", "1", "2"], SERVERS_ON_OFF),
    "fs-clients": ("lines", ["1", "2", "4", "8"], SERVERS_ON_OFF),
    "fs-randread": ("lines", ["1", "2", "4", "8"], SERVERS_ON_OFF),
    "fs-filebench": ("bars", ["1-seqread-uncached", "2-seqread-cached",
                              "3-seqread20-uncached", "4-seqread10-cached",
                              "5-seqwrite", "6-seqwrite20"], SERVERS_ON_OFF),
    "pfs-iozone": ("lines", ["1", "2", "4", "8"], ON_OFF),
}

def axes_chunks(svg: str) -> list[str]:
    """The SVG text of each axes (panel), in drawing order."""
    return re.split(r'<g id="[^"]*-axes_\d+">', svg)[1:]


def xticks(chunk: str) -> list[str]:
    """The x tick labels of one axes, in order."""
    return re.findall(r'id="[^"]*-xtick_\d+">.*?<text[^>]*>([^<]*)</text>', chunk, flags=re.S)


def spec_of(name: str) -> dict[str, Any]:
    """The report spec of family <name>'s synthetic run: the family file, with its order."""
    family = families.load(name)
    return {**family, "order": {**family.get("order", {}), **ORDERS.get(name, {})}}


def size_name(size: int) -> str:
    """A file size as the experiments name it: 4k, 64k, 1m."""
    return f"{size // 1048576}m" if size >= 1048576 else f"{size // 1024}k"


def cell(value: Any) -> str:
    """A summary.csv cell as the runner writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    return "" if value is None else str(value)


def write_summary(path: Path, rows: list[dict[str, Any]]) -> None:
    """summary.csv: columns in order of first appearance, error last."""
    columns = list(dict.fromkeys(k for r in rows for k in r if k != "error")) + ["error"]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(columns)
        for r in rows:
            writer.writerow([cell(r.get(c)) for c in columns])


def manifest(name: str = "dc-test", traces: list | None = None,
             modes: tuple[str, ...] = ("on", "off"), report: dict | None = None) -> dict:
    """A minimal manifest: experiment name, seed, load settings, modes, traces, report spec."""
    man: dict[str, Any] = {"run_id": "synthetic", "status": "complete", "experiment": {
        "name": name, "seed": 7, "load": {"warmup_s": 1, "measure_s": 3},
        "modes": [{"name": m} for m in modes], "traces": traces or []},
        "host": {"cpu_model": "Test CPU @ 2.00GHz"}}
    if report is not None:
        man["report"] = report
    return man


def write_run(path: Path, rows: list[dict], man: dict, web: bool = True,
              shuffle: bool = False) -> Path:
    """summary.csv (point ids in row order; web rows completed from WEB_BASE) + manifest.json."""
    path.mkdir(parents=True)
    if shuffle:
        rows = list(rows)
        random.Random(11).shuffle(rows)
    full = [{"point": f"p{i:03d}", **(WEB_BASE if web else {}), **r}
            for i, r in enumerate(rows, 1)]
    write_summary(path / "summary.csv", full)
    (path / "manifest.json").write_text(json.dumps(man), encoding="utf-8")
    return path


def pfs_row(mode: str, rep: int, mbs: dict[str, float], cpu_per_kb: float, **factors: Any
            ) -> dict[str, Any]:
    """One wide PFS summary row: <phase>_<metric> per phase in mbs (others left empty)."""
    row: dict[str, Any] = {"test": factors.pop("test", "concurrent"), "mode": mode,
                           "repetition": rep, **factors}
    for phase in ("read", "write"):
        v = mbs.get(phase)
        for col in PFS_PHASE:
            row[f"{phase}_{col}"] = None
        if v is None:
            continue
        nbytes = v * 1e6 * 5
        row.update({f"{phase}_mb_per_s": v, f"{phase}_bytes": nbytes, f"{phase}_s": 5.0,
                    f"{phase}_client_cpu_s": cpu_per_kb * nbytes / 1024 / 1e6,
                    f"{phase}_server_cpu_s": cpu_per_kb * nbytes / 1024 / 1e6,
                    f"{phase}_client_cpu_pct": 50.0, f"{phase}_server_cpu_pct": 40.0,
                    f"{phase}_client_cpu_us_per_kb": cpu_per_kb,
                    f"{phase}_server_cpu_us_per_kb": cpu_per_kb,
                    f"{phase}_host_usr_pct": 30.0, f"{phase}_host_sys_pct": 20.0,
                    f"{phase}_host_softirq_pct": 5.0, f"{phase}_host_idle_pct": 45.0,
                    f"{phase}_failed_streams": 0})
    row["integrity"] = "ok"
    return row


def family_rows(name: str) -> tuple[list[dict], list, tuple[str, ...], bool]:
    """(rows, trace specs, modes, web?) of a synthetic run of the family's columns."""
    reps = (1, 2)
    onoff = ("offloads-on", "offloads-off")
    if name in ("dc-single", "dc-worldcup"):
        names = ([f"single-{k}k" for k in (2, 4, 6, 8, 10)] if name == "dc-single"
                 else ["wc98-day46"])
        modes = onoff if name == "dc-single" else tuple(PLATFORMS_ON_OFF)
        traces = [{"name": t, "kind": "single"} for t in names]
        rows = [{"trace": t, "mode": m, "repetition": r,
                 "tps": 1000.0 + 100 * i + 10 * r + (80 if m.endswith("offloads-on") else 0),
                 "host_cpu_us_per_kb": 50.0 - 5 * i + (0 if m.endswith("offloads-on") else 20)}
                for i, t in enumerate(names) for m in modes for r in reps]
        return rows, traces, modes, True
    if name == "latency-at-load":  # a knee between 400 and 800/s
        rates = (100, 400, 800, 1600)
        traces = [{"name": "single-4k", "kind": "single", "size": 4096}]
        rows = [{"trace": "single-4k", "mode": m, "repetition": r, "target_rate": float(q),
                 "achieved_rate": q - r, "rate_short": False,
                 "tps": q - r, "p50_ms": 1.0 + q / 1000 + 0.01 * r,
                 "p99_ms": 3.0 + (q / 400) ** 3 + (0 if m == onoff[0] else 1) + 0.1 * r}
                for q in rates for m in onoff for r in reps]
        return rows, traces, onoff, True
    if name == "dc-zipf":
        alphas = (0.95, 0.9, 0.75, 0.5)
        traces = [{"name": f"zipf-{a}", "kind": "zipf", "alpha": a} for a in alphas]
        rows = [{"trace": f"zipf-{a}", "mode": m, "repetition": r,
                 "tps": 1000 * a + r + (50 if m == onoff[0] else 0)}
                for a in alphas for m in onoff for r in reps]
        return rows, traces, onoff, True
    if name == "dc-static":
        platforms = ("servers-1cpu", "servers-2cpus-half", "servers-2cpus")
        sizes = (1024, 8192, 65536, 262144)
        traces = [{"name": f"single-{s // 1024}k", "kind": "single", "size": s} for s in sizes]
        rows = [{"trace": f"single-{s // 1024}k", "mode": m, "users": u, "repetition": r,
                 "tps": (5000.0 if u == 64 else 800.0) * (1 + j) / (1 + i) + r,
                 "p50_ms": 0.5 * (1 + i) / (1 + j) + 0.01 * r}
                for i, s in enumerate(sizes) for j, m in enumerate(platforms) for u in (1, 64)
                for r in reps]
        return rows, traces, platforms, True
    if name == "net-csum-dc":
        sizes = (4096, 16384, 65536)
        csum = ("checksum-on-tso-off", "checksum-off-tso-off")
        traces = [{"name": f"single-{s // 1024}k", "kind": "single", "size": s} for s in sizes]
        rows = [{"trace": f"single-{s // 1024}k", "mode": m, "repetition": r,
                 "tps": 3000.0 / (1 + i) + r, "mean_ms": 2.0 * (1 + i) + (0.3 if j else 0),
                 "server_cpu_us_per_kb": 4.0 + (2.0 if j else 0) + 0.1 * r}
                for i, s in enumerate(sizes) for j, m in enumerate(csum) for r in reps]
        return rows, traces, csum, True
    if name == "dc-dynamic":
        sizes = (4096, 65536, 262144)
        traces = [{"name": f"{c}-{s // 1024}k", "kind": "single", "size": s,
                   **({"dynamic": {"share": 1.0, "query": "point"}} if c == "dynamic" else {})}
                  for s in sizes for c in ("static", "dynamic")]
        rows = [{"trace": f"{c}-{s // 1024}k", "mode": m, "users": u, "repetition": r,
                 "content": c, "dynamic_share": 1.0 if c == "dynamic" else 0.0,
                 "query": "point" if c == "dynamic" else "",
                 "tps": (3000.0 if u == 64 else 500.0) / (1 + i) / (4 if c == "dynamic" else 1)
                 + (50 if m.endswith("offloads-on") else 0) + r,
                 "p50_ms": 0.3 * (1 + i) * (3 if c == "dynamic" else 1) + 0.01 * r,
                 "cpu_s_app": 0.8 if c == "dynamic" else 0.0,
                 "cpu_s_db": 0.2 if c == "dynamic" else 0.0,
                 "dyn_tps": 120.0 if c == "dynamic" else 0.0,
                 "db_tps": 120.0 if c == "dynamic" else 0.0, "db_rows_read": 360,
                 "db_rows_written": 0, "db_blocks_read": 0,
                 **({"db_rows_read_per_dyn": 1.0, "db_statements_per_dyn": 2.0}
                    if c == "dynamic" else {})}
                for i, s in enumerate(sizes) for c in ("static", "dynamic")
                for m in PLATFORMS_ON_OFF for u in (1, 64) for r in reps]
        rows += [{"trace": "zipf-writes-20", "mode": m, "users": u, "repetition": r,
                  "content": "mixed", "dynamic_share": 0.2, "query": "write", "tps": 900.0 + r,
                  "p50_ms": 1.0, "cpu_s_app": 0.3, "cpu_s_db": 0.3, "dyn_tps": 180.0,
                  "db_tps": 180.0, "db_rows_read": 0, "db_rows_written": 540,
                  "db_blocks_read": 0, "db_rows_read_per_dyn": 0.0,
                  "db_statements_per_dyn": 2.0, "writes_ok": 600, "rows_written": 600,
                  "write_check": "ok"}
                 for m in PLATFORMS_ON_OFF for u in (1, 64) for r in reps]
        traces.append({"name": "zipf-writes-20", "kind": "zipf", "alpha": 0.9,
                       "dynamic": {"share": 0.2, "query": "write"}})
        return rows, traces, tuple(PLATFORMS_ON_OFF), True
    if name == "dc-cpus":
        platforms = ("webapp-1cpu", "webapp-2cpus-half", "webapp-2cpus")
        shape = {"webapp-1cpu": (1, 1.0), "webapp-2cpus-half": (2, 1.0),
                 "webapp-2cpus": (2, 2.0)}
        names = ("static-4k", "static-1m", "dynamic-4k", "dynamic-1m")
        traces = [{"name": t, "kind": "single", "size": 4096 if t.endswith("4k") else 1048576}
                  for t in names]
        rows = [{"trace": t, "mode": m, "repetition": r, "cpus": shape[m][0],
                 "cpu_time": shape[m][1],
                 "tps": (4000.0 if t.endswith("4k") else 300.0) * (shape[m][0] if
                                                                   t != "static-1m" else 1)
                 + r, "cpu_s_app": 0.5 if t.startswith("dynamic") else 0.0, "cpu_s_db": 0.1}
                for t in names for m in platforms for r in reps]
        return rows, traces, platforms, True
    if name == "dc-alpha-cache":
        alphas = (0.5, 0.75, 0.9, 0.99)
        cache = tuple(PLATFORMS_CACHE)
        traces = [{"name": f"zipf-{a}", "kind": "zipf", "alpha": a} for a in alphas]
        rows = [{"trace": f"zipf-{a}", "mode": m, "repetition": r,
                 "tps": 1000.0 + (500 * a if m.endswith("cache-on") else 0) + r,
                 "p50_ms": 40.0 - (20 * a if m.endswith("cache-on") else 0),
                 **({"proxy_hit_ratio": 0.8 + 0.2 * a} if m.endswith("cache-on") else {})}
                for a in alphas for m in cache for r in reps]
        return rows, traces, cache, True
    if name == "dc-cache-hit":
        sizes, ratios = (4096, 65536, 1048576), (1.0, 0.5, 0.0)
        traces = [{"name": f"{size_name(s)}-hit{round(100 * h)}", "kind": "hit-ratio", "size": s,
                   "hit_ratio": h, "requests": 1000} for s in sizes for h in ratios]
        rows = [{"trace": f"{size_name(s)}-hit{round(100 * h)}", "mode": "offloads-on",
                 "docroot": d, "repetition": r, "tps": 5000.0 / (1 + i) * (0.5 + h / 2) + r,
                 "p50_ms": 0.2 * (1 + i) * (2 - h) + 0.01 * r,
                 "mean_ms": 0.2 * (1 + i) * (2 - h) * (3 - j) + 0.01 * r,
                 "page_cache_hit_ratio": h * 0.98 + 0.01, "web_disk_read_mb": 10.0 * (1 - h)}
                for i, s in enumerate(sizes) for h in ratios for j, d in enumerate(DISKS)
                for r in reps]
        return rows, traces, ("offloads-on",), True
    if name == "dc-disk-file":
        sizes = (4096, 65536, 1048576, 4194304)
        traces = [{"name": f"{size_name(s)}-{c}", "kind": "hit-ratio", "size": s,
                   "hit_ratio": h, "requests": 300}
                  for s in sizes for c, h in (("cached", 1.0), ("uncached", 0.0))]
        rows = [{"trace": t["name"], "mode": "offloads-on", "docroot": d, "repetition": r,
                 "users": 1, "tps": 100.0 + r,
                 "mean_ms": 0.2 + t["size"] / 1e6 * (0.1 if t["hit_ratio"] else 10 / (1 + j))
                 + 0.01 * r, "page_cache_hit_ratio": t["hit_ratio"]}
                for t in traces for j, d in enumerate(DISKS) for r in reps]
        return rows, traces, ("offloads-on",), True
    if name == "dc-disk-classes":
        rows = [{"trace": f"class-{c}", "mode": "offloads-on", "docroot": d, "users": u,
                 "repetition": r, "tps": (3000.0 if u == 64 else 400.0) / (1 + c) * (1 + j / 4)
                 + r, "mean_ms": 0.4 * (1 + c) / (1 + j / 4) + 0.01 * r,
                 "file_ms_small": 0.3 + 0.1 * c, "file_ms_medium": 1.0 + c / (1 + j),
                 "file_ms_large": 10.0 * (1 + c) / (1 + j)}
                for c in range(4) for j, d in enumerate(DISKS) for u in (1, 64) for r in reps]
        return rows, [], ("offloads-on",), True
    if name == "dc-placement":
        strategies = ("single-disk", "random", "popularity", "size", "raid-single", "raid")
        rows = [{"trace": f"class-{c}", "mode": "offloads-on", "docroot": "scsi",
                 "placement": p, "users": 64, "repetition": r,
                 "mean_ms": 5.0 * c / (1 + k / 3) + 0.1 * r, "tps": 500.0 / c * (1 + k / 3)}
                for c in (1, 3) for k, p in enumerate(strategies) for r in reps]
        return rows, [], ("offloads-on",), True
    if name == "dc-disk-basic":
        rows = [{"system": d, "emulated": True, "mode": "offloads-on", "repetition": r,
                 "filesystem": "ext3", "block_size": 1048576, "file_mb": 512,
                 **{f"{ph}_{k}": v for ph, rate in (("write", w), ("read", rd))
                    for k, v in (("mb_per_s", rate + r), ("iops", rate), ("lat_ms", 20.0),
                                 ("bytes", rate * 1e7), ("s", 10.0), ("cpu_pct", 3.0),
                                 ("cpu_us_per_kb", 0.5), ("host_iowait_pct", 1.0),
                                 ("host_idle_pct", 90.0))},
                 "throttle_read_mb_s": rd, "throttle_write_mb_s": w, "throttle": "ok"}
                for d, rd, w in (("ide", 35.0, 39.0), ("scsi", 58.0, 55.0),
                                 ("raid0", 170.0, 160.0)) for r in reps]
        return rows, [], ("offloads-on",), False
    if name == "dc-clients":
        traces = [{"name": "single-16k", "kind": "single", "size": 16384}]
        rows = [{"trace": "single-16k", "mode": m, "users": u, "repetition": r,
                 "tps": 100.0 * u ** 0.5 + r, "generator_cpu_pct": min(100.0, 10.0 * u)}
                for u in (1, 4, 16, 64, 256) for m in onoff for r in reps]
        return rows, traces, onoff, True
    if name == "dc-classes":
        rows = [{"trace": f"class-{c}", "mode": "offloads-on", "docroot": d, "repetition": r,
                 "tps": 100.0 * (c + 1) + r + 10 * j}
                for c in range(5) for j, d in enumerate(("tmpfs", "ide", "orangefs"))
                for r in reps]
        return rows, [], ("offloads-on",), True
    if name == "dc-hybrid":
        rows = [{"trace": f"bg-class-{c}", "mode": "offloads-on", "docroot": d,
                 "repetition": r, "tps": 300.0 + r, "p50_ms_foreground": 10.0,
                 "tps_foreground": 100.0 * (c + 1) + (50 if "hot" in d else 0) + r}
                for c in (1, 2) for d in ("ide", "ide+hot-tmpfs", "orangefs",
                                          "orangefs+hot-tmpfs") for r in reps]
        return rows, [], ("offloads-on",), True
    if name == "pfs-concurrent":
        rows = [pfs_row(m, r, {"read": 100.0 * c + r + (60 if m == onoff[0] else 0),
                               "write": 90.0 * c + r},
                        2.0 if m == onoff[0] else 4.0, io_servers=n, clients=c, streams=c,
                        access="native", buffer=1048576)
                for n in (5, 6) for c in (1, 2, 4, 6) for m in onoff for r in reps]
        return rows, [], onoff, False
    if name == "pfs-streams":
        rows = [pfs_row(m, r, {"read": 50.0 * s ** 0.5 + r}, 2.0 if m == onoff[0] else 3.0,
                        test="streams", io_servers=6, clients=min(s, 4), streams=s)
                for s in (1, 2, 4, 8, 16, 32, 64) for m in onoff for r in reps]
        return rows, [], onoff, False
    if name == "pfs-basic":
        fss = ("tmpfs", "disk", "orangefs", "orangefs-native")
        rows = [pfs_row("offloads-on", r, {"read": 100.0 * (4 - i) + b / 65536 + r,
                                           "write": 90.0 * (4 - i) + r}, 1.0, test="basic",
                        io_servers=3, clients=1, streams=1, filesystem=fs, buffer=b,
                        access="native" if fs == "orangefs-native" else "posix")
                for i, fs in enumerate(fss) for b in (4096, 65536, 1048576) for r in reps]
        return rows, [], ("offloads-on",), False
    if name == "net-streams":
        rows = [{"trace": "", "connections": c, "write_size": 131072, "direction": "uni",
                 "mode": m, "repetition": r,
                 "mb_per_s": 600.0 + 10 * c ** 0.5 + (1900 if m == onoff[0] else 0) + r,
                 "server_cpu_pct": 50.0 + 0.1 * c - (10 if m == onoff[0] else 0),
                 "server_cpu_us_per_kb": 0.5 if m == onoff[0] else 1.5,
                 "bytes_moved": 1024 * 1000, "cpu_s_servers": 0.001 * r}
                for c in (1, 4, 16, 60, 120) for m in onoff for r in reps]
        return rows, [], onoff, True
    if name == "net-csum":
        modes = ("checksum-on-tso-off", "checksum-off-tso-off")
        rows = [{"trace": "", "connections": 1, "write_size": w, "direction": "uni", "mode": m,
                 "repetition": r, "mb_per_s": 2000.0 + r,
                 "server_cpu_us_per_kb": (0.2 if m == modes[0] else 0.5) + 0.01 * r,
                 "client_cpu_us_per_kb": (0.3 if m == modes[0] else 0.9) + 0.01 * r}
                for w in (16384, 65536) for m in modes for r in reps]
        return rows, [], modes, True
    if name == "net-bw":
        rows = [{"trace": "", "receivers": n, "connections": 1, "write_size": 131072,
                 "direction": d, "mode": m, "repetition": r,
                 "mb_per_s": 500.0 * n * (2 if d == "bi" else 1) + (900 if m == onoff[0] else 0)
                 + r, "server_cpu_pct": 20.0 * n - (5 if m == onoff[0] else 0)}
                for n in (1, 2, 4, 6) for d in ("uni", "bi") for m in onoff for r in reps]
        return rows, [], onoff, True
    if name == "net-msgsize":
        rows = [{"trace": "", "receivers": 4, "connections": 1, "write_size": w,
                 "direction": "uni", "mode": m, "repetition": r, "mb_per_s": 2000.0 + r,
                 "server_cpu_us_per_kb": (0.2 if m == onoff[0] else 0.6) + 1000 / w}
                for w in (16384, 65536, 1048576) for m in onoff for r in reps]
        return rows, [], onoff, True
    if name == "net-latency":
        rows = [{"trace": "", "receivers": 4, "clients": c, "message_size": 64, "mode": m,
                 "repetition": r, "sessions": 4 * c,
                 "p50_us": 20.0 + 3 * c + (0 if m == onoff[0] else 2) + 0.1 * r,
                 "p99_us": 40.0 + 10 * c, "host_cpu_us_per_kb": 5.0}
                for c in (1, 2, 3, 4, 5, 6) for m in onoff for r in reps]
        return rows, [], onoff, True
    platforms = ("platform-2400mhz", "platform-1000mhz", "platform-700mhz")
    if name == "net-platform":
        rows = [{"trace": "", "message_size": s, "mode": m, "repetition": r,
                 "p50_us": (20.0 + s / 1000) * (1 + j) + 0.1 * r,
                 "p99_us": (40.0 + s / 500) * (1 + j), "host_cpu_us_per_kb": 5.0}
                for s in (14, 256, 1024, 4096, 16384, 65536) for j, m in enumerate(platforms)
                for r in reps]
        return rows, [], platforms, True
    if name == "net-platform-bw":
        rows = [{"trace": "", "connections": 1, "write_size": w, "direction": "uni", "mode": m,
                 "repetition": r, "mb_per_s": (200.0 + w / 1000) / (1 + j) + r,
                 "server_cpu_pct": 90.0 - 10 * j}
                for w in (1024, 4096, 16384, 65536, 262144) for j, m in enumerate(platforms)
                for r in reps]
        return rows, [], platforms, True
    if name == "net-b2b":
        rows = [{"trace": "", "connections": 1, "write_size": w, "direction": "uni", "mode": m,
                 "repetition": r, "mb_per_s": 2000.0 + (1500 if m == onoff[0] else 0) + r,
                 "host_cpu_us_per_kb": (0.5 if m == onoff[0] else 1.5) + 0.01 * r}
                for w in (16384, 65536) for m in onoff for r in reps]
        return rows, [], onoff, True
    if name == "net-b2b-rr":
        rows = [{"trace": "", "message_size": s, "mode": m, "repetition": r,
                 "p50_us": 20.0 + s / 1000 + (0 if m == onoff[0] else 2) + 0.1 * r,
                 "p99_us": 40.0 + s / 500, "messages_per_s": 20000.0 / (1 + s / 16384),
                 "host_cpu_us_per_kb": 5.0}
                for s in (14, 64, 1024, 16384, 65536) for m in onoff for r in reps]
        return rows, [], onoff, True
    if name == "net-sockopt":
        gro = ("gro-on", "gro-off")
        cases = ("sockopt-1-default", "sockopt-2-socket-buffers", "sockopt-3-tso",
                 "sockopt-4-jumbo")
        rows = [{"trace": "", "connections": 1, "write_size": 65536, "direction": d, "case": c,
                 "mode": m, "repetition": r, "mb_per_s": 500.0 * (1 + k) + r,
                 "server_cpu_pct": 60.0 - 5 * k - (10 if m == gro[0] else 0) + 0.5 * r,
                 "server_cpu_us_per_kb": 2.0 - 0.2 * k - (0.5 if m == gro[0] else 0)}
                for d in ("uni", "bi") for k, c in enumerate(cases) for m in gro for r in reps]
        return rows, [], gro, True
    if name == "net-txprofile":
        rows = [{"trace": "", "receivers": 4, "connections": c, "write_size": w,
                 "direction": "uni", "mode": "offloads-on", "repetition": r,
                 "mb_per_s": 800.0 + r, "connections_established": c + -(-c // 125),
                 "prof_write_pct": 30.0 + r, "prof_tcp_output_pct": 20.0 + (5 if c > 100 else 0),
                 "prof_driver_tx_pct": 10.0, "prof_ack_pct": 8.0 + (4 if c > 100 else 0),
                 "segments_per_ack": 4.0 if c > 100 else 8.0}
                for c in (100, 4000) for w in (8192, 65536) for r in reps]
        return rows, [], ("offloads-on",), True
    if name == "pfs-profile":
        rows = [{"trace": "", "receivers": 4, "clients": c, "connections": 1,
                 "write_size": 65536, "direction": "uni", "mode": m, "repetition": r,
                 "mb_per_s": 1000.0 * min(c, 4) + (500 if m == onoff[0] else 0) + r,
                 "server_cpu_pct": 20.0 * c - (5 if m == onoff[0] else 0)}
                for c in (1, 2, 3, 4, 5, 6) for m in onoff for r in reps]
        return rows, [], onoff, True
    if name == "net-dmacopy":
        rows = [{"trace": "", "message_size": c, "mode": "offloads-on", "repetition": r,
                 "memcpy_hot_us": c / 8192 + 0.01 * r, "memcpy_cold_us": c / 2048 + 0.01 * r,
                 "memcpy_hot_mb_per_s": 8192.0, "memcpy_cold_mb_per_s": 2048.0,
                 "memcpy_cold_cycles_est": 2600 * c / 2048}
                for c in (1024, 4096, 8192, 16384, 65536) for r in reps]
        return rows, [], ("offloads-on",), True
    if name == "net-conns":
        rows = [{"trace": f"write-{w // 1024}k", "write_size": w, "connections": c, "mode": m,
                 "repetition": r, "mb_per_s": 100.0 + r, "bytes_moved": 1024 * 1000,
                 "cpu_s_servers": 0.001 * r, "client_cpu_s": 0.001 * r,
                 "connections_established": c + -(-c // 125)}
                for w in (65536, 1024) for c in (1, 100, 6000) for m in onoff for r in reps]
        return rows, [], onoff, True
    if name in ("fs-thinktime", "fs-clients", "fs-randread"):
        modes = ("servers-offloads-on", "servers-offloads-off")
        x, values = (("think_ms", (0, 0.5, 1, 2)) if name == "fs-thinktime"
                     else ("programs", (1, 2, 4, 8)))
        rows = [{"test": "dbench", "server": "gluster", "load": load, "programs": 1,
                 "think_ms": 0, x: v, "mode": m, "repetition": r,
                 "mb_per_s": 20.0 / (1 + v) + (2 if m == modes[0] else 0) + 0.1 * r,
                 "iops": 100.0, "latency_ms": 1.0, "p99_ms": 3.0, "max_latency_ms": 30.0,
                 "server_cpu_pct": 40.0 + v, "client_cpu_pct": 30.0,
                 "server_net_mb_per_s": 22.0, "server_cpu_us_per_kb": 20.0 + r,
                 "client_cpu_us_per_kb": 15.0, "host_cpu_us_per_kb": 40.0 + r,
                 "hog_cpu_pct": 60.0 if load == "busy" else None}
                for load in ("idle", "busy") for v in values for m in modes for r in reps]
        return rows, [], modes, False
    if name == "fs-filebench":
        modes = ("servers-offloads-on", "servers-offloads-off")
        names = ("1-seqread-uncached", "2-seqread-cached", "3-seqread20-uncached",
                 "4-seqread10-cached", "5-seqwrite", "6-seqwrite20",
                 "7-randread20-uncached", "8-randread128", "9-syncwrite128")
        rows = [{"test": "filebench", "server": "gluster", "load": "idle", "workload": w,
                 "mode": m, "repetition": r, "threads": 1,
                 "mb_per_s": 100.0 + i + (5 if m == modes[0] else 0) + r,
                 "iops": 1000.0 * (i + 1), "latency_ms": 1.0, "p99_ms": 3.0,
                 "set_passes": 0.5, "server_cpu_pct": 50.0, "hog_cpu_pct": None,
                 "client_cpu_pct": 30.0, "server_net_mb_per_s": 110.0 + i,
                 "server_cpu_us_per_kb": 3.0 + r, "client_cpu_us_per_kb": 2.0,
                 "host_cpu_us_per_kb": 6.0 + r}
                for i, w in enumerate(names) for m in modes for r in reps]
        return rows, [], modes, False
    if name == "pfs-iozone":
        rows = []
        for s in (1, 2, 4, 8):
            for m in onoff:
                for r in reps:
                    row: dict[str, Any] = {"test": "iozone", "server": "orangefs",
                                           "sessions": s, "mode": m, "repetition": r}
                    for phase, base in (("write", 200.0), ("read", 300.0)):
                        row.update({f"{phase}_mb_per_s": base + 10 * s + r
                                    + (50 if m == onoff[0] else 0),
                                    f"{phase}_iops": base, f"{phase}_client_cpu_pct": 80.0 - s,
                                    f"{phase}_server_cpu_pct": 40.0 + 5 * s,
                                    f"{phase}_client_cpu_us_per_kb": 2.0 + r,
                                    f"{phase}_server_cpu_us_per_kb": 3.0 + r,
                                    f"{phase}_server_net_mb_per_s": base,
                                    f"{phase}_host_cpu_us_per_kb": 6.0 + r})
                    rows.append(row)
        return rows, [], onoff, False
    raise ValueError(name)


def family_run(root: Path, name: str) -> Path:
    """A two-repetition synthetic run of a family (its columns, modes and factors), its family
    file as the report spec."""
    rows, traces, modes, web = family_rows(name)
    man = manifest(name, traces, modes, spec_of(name))
    if name.startswith("fs-") or name == "pfs-iozone":
        man["kind"] = "fs"
        man["experiment"]["fs"] = {"test": rows[0]["test"], "server": rows[0]["server"],
                                   "measure_s": 10}
        if name == "fs-filebench":  # the kind's order: the experiment's list of workloads
            man["report"]["order"] = {"workload": list(dict.fromkeys(
                r["workload"] for r in sorted(rows, key=lambda r: r["workload"])))}
        return write_run(root / name, rows, man, web=False, shuffle=True)
    if spec_of(name)["kind"] == "disk":
        man["kind"] = "disk"
        man["experiment"]["disk"] = {"systems": list(DISKS), "file_mb": 512}
    elif not web:
        man["kind"] = "pfs"
        man["experiment"]["pfs"] = {"test": name.split("-")[1], "io_servers": [5, 6],
                                    "strip_size": 65536, "storage": "tmpfs"}
        man["orangefs"] = "sha256 0123abcd"
    return write_run(root / name, rows, man, web=web, shuffle=True)
