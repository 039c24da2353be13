"""Small synthetic runs in the results layout, one per experiment family, for the analysis tests."""

from __future__ import annotations

import json
from pathlib import Path

from tierbench.kinds.webmetrics import SUMMARY_COLUMNS
from tierbench.runner import write_summary


def manifest(name: str = "dc-test", traces: list | None = None) -> dict:
    """A minimal manifest: experiment name, seed, load settings, two modes, trace specs."""
    return {"run_id": "synthetic", "experiment": {
        "name": name, "seed": 7, "load": {"warmup_s": 1, "measure_s": 3},
        "modes": [{"name": "on"}, {"name": "off"}], "traces": traces or []}}


def write_run(path: Path, rows: list[dict], man: dict) -> Path:
    """summary.csv (through the runner's own writer) + manifest.json in a new folder."""
    path.mkdir(parents=True)
    full = []
    for i, r in enumerate(rows, 1):
        base = {"point": f"p{i:03d}", "repetition": 1, "engine": "locust", "users": 16,
                "window_s": 3.0, "requests": 300, "errors": 0, "cpu_s_loadgen": 1.0,
                "cpu_s_proxy": 0.5, "cpu_s_web": 0.5, "cpu_s_servers": 1.0,
                "generator_cpu_pct": 50.0, "bytes_moved": 1024 * 300, "mb_per_s": 0.1,
                "server_cpu_us_per_req": 3333.3, "server_cpu_us_per_kb": 3333.3,
                "host_cpu_us_per_kb": 5000.0, "client_bound": False, "tps": 100.0,
                "p50_ms": 5.0, "p99_ms": 20.0, "host_usr_pct": 40.0, "host_sys_pct": 20.0,
                "host_irq_pct": 0.0, "host_softirq_pct": 5.0, "host_iowait_pct": 0.0,
                "host_steal_pct": 0.0, "host_idle_pct": 35.0}
        full.append({**base, **r})
    write_summary(path / "summary.csv", full, SUMMARY_COLUMNS)
    (path / "manifest.json").write_text(json.dumps(man))
    return path


def family_run(root: Path, family: str) -> Path:
    """A two-repetition sweep shaped like the family's experiment."""
    reps = (1, 2)
    modes = ("on", "off")
    if family == "dc-single":
        traces = [{"name": f"single-{k}k", "kind": "single", "size": k * 1024} for k in (2, 4, 8)]
        rows = [{"trace": t["name"], "mode": m, "repetition": r, "tps": 1000.0 + 10 * r
                 + (80 if m == "on" else 0), "size_bytes": t["size"]}
                for t in traces for m in modes for r in reps]
    elif family == "dc-zipf":
        traces = [{"name": f"zipf-{a}", "kind": "zipf", "alpha": a} for a in (0.5, 0.75, 0.9)]
        rows = [{"trace": t["name"], "mode": m, "repetition": r,
                 "tps": 1000 * t["alpha"] + r + (50 if m == "on" else 0)}
                for t in traces for m in modes for r in reps]
    elif family == "dc-clients":
        traces = [{"name": "single-16k", "kind": "single", "size": 16384}]
        rows = [{"trace": "single-16k", "mode": m, "users": u, "repetition": r,
                 "tps": 100.0 * u ** 0.5 + r, "generator_cpu_pct": min(100.0, 10.0 * u)}
                for u in (1, 4, 16, 64, 256) for m in modes for r in reps]
    elif family == "dc-classes":
        traces = []
        rows = [{"trace": f"class-{c}", "mode": "default", "docroot": d, "repetition": r,
                 "tps": 100.0 * (c + 1) + r}
                for c in range(5) for d in ("tmpfs", "ext4", "orangefs") for r in reps]
    elif family == "dc-hybrid":
        traces = []
        rows = [{"trace": f"bg-class-{c}", "mode": "default", "docroot": d, "repetition": r,
                 "tps": 300.0 + r, "tps_foreground": 100.0 * (c + 1) + (50 if "hot" in d else 0)}
                for c in (1, 2) for d in ("disk", "disk+hot-tmpfs") for r in reps]
    elif family == "pfs":
        traces = []
        rows = [{"trace": op, "mode": m, "users": c, "repetition": r, "mb_per_s": 100.0 * c + r}
                for op in ("read", "write") for c in range(1, 7) for m in modes for r in reps]
    elif family == "net-conns":
        traces = []
        rows = [{"trace": w, "mode": m, "users": c, "repetition": r, "mb_per_s": 100.0 + r,
                 "bytes_moved": 1024 * 1000, "cpu_s_servers": 0.001 * r}
                for w in ("write-1k", "write-64k") for c in (1, 100, 6000) for m in modes
                for r in reps]
    else:
        raise ValueError(family)
    name = "pfs-concurrent" if family == "pfs" else family
    man = manifest(name, traces)
    man["host"] = {"cpu_model": "Test CPU @ 2.00GHz"}
    return write_run(root / family, rows, man)
