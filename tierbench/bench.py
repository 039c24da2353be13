"""Engine benchmarks (`make bench`; prints figures, is not a test).

1. wrk engine TPS / plain wrk TPS: same target file, connections and threads, alternated in one
   run (ABBA: plain, engine, engine, plain, ...), medians compared. Goal >= 0.95, and the
   same for requests per loadgen CPU-second of each, steadier than TPS when the host is shared.
2. Locust engine requests per client CPU-second / a bare FastHttpUser's: same target file, one
   process, CPU from the loadgen container's cgroup, alternated, medians compared. Goal >= 0.95.
3. `--profile-cost`: what `--profile categories` costs (issue 43), on quick's points: quick run
   without and with the profile (alternated over --rounds, at --scale), and per condition the
   ratio of the medians, profiled / not, of TPS and of host CPU per KB. Brings the stack up
   itself (a `tierbench run`) and leaves it up, as a run does.

Usage: python -m tierbench.bench --loadgen CONTAINER --results DIR [--target URL] [--path P]
DIR is the host folder mounted at /results in the loadgen container.
       python -m tierbench.bench --profile-cost [--scale F] [--rounds N]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tierbench import transport
from tierbench.config.files import results_root
from tierbench.kinds.web import engines, load, wrk
from tierbench.measure.sampler import CgroupCpu
from tierbench.placement.model import Container
from tierbench.placement.local import LocalPlacer
from tierbench.transport import run_argv
from workloads import traces

GOAL = 0.95  # each engine's ratio to the bare tool (the founders' brief)

BARE_LOCUSTFILE = '''"""A bare FastHttpUser: the reference the trace-replaying engine is compared with."""
import os

from locust import FastHttpUser, task

PATH = os.environ["BENCH_PATH"]


class BareUser(FastHttpUser):
    @task
    def get(self):
        self.client.get(PATH)
'''


def container(name: str) -> Container:
    """A running container by name or id, as the engines need it."""
    done = run_argv(["docker", "inspect", name], timeout=30)
    if done.returncode != 0:
        raise load.LoadgenError(f"no container named {name!r} is running")
    info = json.loads(done.stdout)[0]
    return Container(service=name, id=info["Id"], name=info["Name"].lstrip("/"),
                     pid=int(info["State"]["Pid"]), image=info["Config"]["Image"],
                     image_id=info["Image"], cpuset=info["HostConfig"].get("CpusetCpus") or "")


def one_file_trace(work: Path, path: str) -> Path:
    """A trace of one request for `path`, in the engines' format (with its index), which both
    engines replay over and over."""
    trace = work / "bench-trace.txt"
    if not trace.exists():
        traces.write_chunks(trace, [[path]], "bench: one file")
    return trace


def plain_wrk(gen: Container, url: str, connections: int, threads: int, seconds: int,
              log: Path) -> float:
    """Requests/s of wrk without any script against one URL."""
    argv = ["docker", "exec", gen.id, "wrk", "-t", str(threads), "-c", str(connections),
            "-d", f"{seconds}s", url]
    done = run_argv(argv, timeout=seconds + 60)
    log.write_text(done.stdout + done.stderr)
    found = re.search(r"(\d+) requests in ([\d.]+)(m?s)", done.stdout)
    if done.returncode != 0 or not found:
        raise load.LoadgenError(f"plain wrk failed: {(done.stderr or done.stdout).strip()}")
    dur = float(found.group(2)) / (1000 if found.group(3) == "ms" else 1)
    return int(found.group(1)) / dur


def wrk_ratio(gen: Container, target: str, path: str, connections: int, threads: int,
              seconds: int, rounds: int, work: Path) -> dict:
    """Alternate plain wrk and the wrk engine; medians and their ratio."""
    trace = one_file_trace(work, path)
    spec = load.LoadSpec("wrk", connections, 0.0, seconds, processes=threads, target=target)
    load.check_spec(spec)
    url = wrk.wrk_url(target).rstrip("/") + path
    plain_wrk(gen, url, connections, threads, 2, work / "wrk-warm.txt")
    cg = CgroupCpu(gen.pid)
    plain, engine, plain_eff, engine_eff = [], [], [], []
    for r in range(rounds):
        # ABBA order (plain first in even rounds, engine first in odd ones) cancels any trend
        # in the host's other load.
        for which in (("plain", "engine") if r % 2 == 0 else ("engine", "plain")):
            c0 = cg.read()["usage_s"]
            if which == "plain":
                tps = plain_wrk(gen, url, connections, threads, seconds, work / f"plain-{r}.txt")
                plain.append(tps)
                plain_eff.append(tps * seconds / max(cg.read()["usage_s"] - c0, 1e-9))
                continue
            rdir = work / f"engine-{r}"
            rdir.mkdir(exist_ok=True)
            res = engines.run(spec, gen, rdir, trace)
            cpu = cg.read()["usage_s"] - c0
            assert res.aggregate is not None  # the engine's counts of a finished run
            engine.append(res.aggregate["requests"] / (res.window[1] - res.window[0]))
            engine_eff.append(res.aggregate["requests"] / max(cpu, 1e-9))
    return {"plain_tps": plain, "engine_tps": engine,
            "ratio": statistics.median(engine) / statistics.median(plain),
            "plain_req_per_cpu_s": plain_eff, "engine_req_per_cpu_s": engine_eff,
            "cpu_ratio": statistics.median(engine_eff) / statistics.median(plain_eff)}


def _locust_count(stats_csv: Path) -> int:
    with stats_csv.open(newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["Name"] == "Aggregated"]
    return int(rows[0]["Request Count"]) if rows else 0


def _locust_engine(gen: Container, cg: CgroupCpu, target: str, trace: Path, users: int,
                   seconds: int, rdir: Path) -> tuple[int, float]:
    """One run of the engine (the real run() path: TraceUser, request log): requests, CPU-s."""
    spec = load.LoadSpec("locust", users, 0.0, seconds, target=target)
    c0 = cg.read()["usage_s"]
    engines.run(spec, gen, rdir, trace)
    return _locust_count(rdir / "locust_stats.csv"), cg.read()["usage_s"] - c0


def _locust_bare(gen: Container, cg: CgroupCpu, target: str, path: str, users: int,
                 seconds: int, rdir: Path) -> tuple[int, float]:
    """One run of a bare FastHttpUser, same users, duration and target: requests, CPU-s."""
    (rdir / "bare.py").write_text(BARE_LOCUSTFILE)
    argv = ["locust", "-f", load.container_path(rdir / "bare.py"), "--headless",
            "--host", target, "-u", str(users), "-r", str(users), "-t", f"{seconds}s",
            "--stop-timeout", "5", "--only-summary", "--exit-code-on-error", "0",
            "--csv", load.container_path(rdir / "locust")]
    c0 = cg.read()["usage_s"]
    code = load.exec_engine(LocalPlacer(), argv, {"BENCH_PATH": path}, gen, rdir / "locust.log",
                            seconds + 60, "bare Locust")
    if code != 0:
        raise load.LoadgenError(f"bare Locust exited with code {code}")
    return _locust_count(rdir / "locust_stats.csv"), cg.read()["usage_s"] - c0


def locust_ratio(gen: Container, target: str, path: str, users: int, seconds: int,
                 rounds: int, work: Path) -> dict:
    """Requests per loadgen CPU-second, engine vs bare FastHttpUser, alternated; medians."""
    cg = CgroupCpu(gen.pid)
    trace = one_file_trace(work, path)
    engine: list[tuple[int, float]] = []
    bare: list[tuple[int, float]] = []
    for r in range(rounds):
        order: list[tuple[str, list[tuple[int, float]], Callable[..., tuple[int, float]]]] = [
            ("engine", engine, _locust_engine), ("bare", bare, _locust_bare)]
        for name, runs, fn in (order if r % 2 == 0 else order[::-1]):
            rdir = work / f"locust-{name}-{r}"
            rdir.mkdir(exist_ok=True)
            arg = trace if name == "engine" else path
            runs.append(fn(gen, cg, target, arg, users, seconds, rdir))
    if any(n == 0 or c <= 0 for n, c in engine + bare):
        raise load.LoadgenError("a Locust run completed no request; run longer (--seconds)")
    e_eff = statistics.median(n / c for n, c in engine)
    b_eff = statistics.median(n / c for n, c in bare)
    return {"engine": engine, "bare": bare, "engine_req_per_cpu_s": e_eff,
            "bare_req_per_cpu_s": b_eff, "ratio": e_eff / b_eff}


PROFILE_COST_FIGURES = (("tps", "TPS"), ("host_cpu_us_per_kb", "host CPU us/KB"))


def quick_run(experiment: str, scale: float, profiled: bool) -> Path:
    """One `tierbench run` of ``experiment`` (profiled or not): its run folder."""
    argv = [sys.executable, "-m", "tierbench.cli", "run", experiment, "--scale", f"{scale:g}",
            *(["--profile", "categories"] if profiled else [])]
    done = transport.run_argv(argv, timeout=7200)
    found = re.search(r"tierbench: done: (.+)/summary\.csv", done.stdout)
    if done.returncode != 0 or not found:
        why = (done.stderr.strip().splitlines() or ["no reason given"])[-1]
        raise load.LoadgenError(f"`{' '.join(argv[2:])}` failed: {why}")
    return Path(found.group(1))


def condition_values(run_dir: Path) -> dict[tuple[str, str], dict[str, list[float]]]:
    """Per condition (trace, mode) of a web run's summary.csv, each of PROFILE_COST_FIGURES
    over its points without an error."""
    with (run_dir / "summary.csv").open(newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if not r.get("error")]
    out: dict[tuple[str, str], dict[str, list[float]]] = {}
    for key in sorted({(r["trace"], r["mode"]) for r in rows}):
        mine = [r for r in rows if (r["trace"], r["mode"]) == key]
        out[key] = {c: [float(r[c]) for r in mine if r.get(c)] for c, _ in PROFILE_COST_FIGURES}
    return out


def profile_cost(experiment: str, scale: float, rounds: int) -> dict:
    """Runs of ``experiment`` without and with --profile categories, alternated (off, on, on,
    off, ...); per condition the ratio profiled / not of the medians of each figure over all
    the runs' points."""
    runs: dict[bool, list[Path]] = {False: [], True: []}
    for r in range(rounds):
        for on in ((False, True) if r % 2 == 0 else (True, False)):
            runs[on].append(quick_run(experiment, scale, on))
    return cost_of(runs)


def cost_of(runs: dict[bool, list[Path]]) -> dict:
    """The runs' figures per condition (profiled or not: every point's, over the runs) and the
    ratio profiled / not of their medians."""
    got = {on: [condition_values(d) for d in dirs] for on, dirs in runs.items()}
    ratios: dict[str, dict[str, float]] = {}
    values: dict[str, dict[str, dict[str, list[float]]]] = {}
    for key in got[False][0]:
        name = f"{key[0]} {key[1]}"
        ratios[name], values[name] = {}, {}
        for col, _ in PROFILE_COST_FIGURES:
            v = {("on" if on else "off"): [x for m in got[on] for x in m[key][col]]
                 for on in (False, True)}
            values[name][col] = v
            ratios[name][col] = statistics.median(v["on"]) / statistics.median(v["off"])
    return {"runs": {("on" if k else "off"): [str(d) for d in v] for k, v in runs.items()},
            "ratios": ratios, "values": values}


def profile_cost_main(args: argparse.Namespace) -> int:
    """--profile-cost: print, per condition, the ratios profiled / not."""
    t0 = time.time()
    try:
        got = profile_cost(args.experiment, args.scale, args.rounds)
    except (load.LoadgenError, transport.TransportError) as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    print(f"bench: --profile categories against none, {args.experiment} at --scale "
          f"{args.scale:g}, {args.rounds} run(s) each alternated, {time.time() - t0:.0f} s; runs: "
          + ", ".join(f"{k} {' '.join(v)}" for k, v in got["runs"].items()))
    print("  condition: ratio profiled / not of the medians: "
          + ", ".join(lab for _, lab in PROFILE_COST_FIGURES))
    for name, r in got["ratios"].items():
        print(f"  {name}: " + ", ".join(f"{r[c]:.3f}" for c, _ in PROFILE_COST_FIGURES))
        for col, lab in PROFILE_COST_FIGURES:
            v = got["values"][name][col]
            print(f"    {lab}: not profiled " + " ".join(f"{x:.4g}" for x in v["off"])
                  + "; profiled " + " ".join(f"{x:.4g}" for x in v["on"]))
    for col, lab in PROFILE_COST_FIGURES:
        print(f"  median over conditions, {lab}: "
              f"{statistics.median(r[col] for r in got['ratios'].values()):.3f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run both benchmarks and print the ratios with their inputs (or --profile-cost's)."""
    ap = argparse.ArgumentParser(prog="python -m tierbench.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile-cost", action="store_true",
                    help="only the cost of --profile categories (runs EXPERIMENT itself)")
    ap.add_argument("--experiment", default="quick", help="--profile-cost's experiment")
    ap.add_argument("--scale", type=float, default=0.6, help="--profile-cost's --scale")
    ap.add_argument("--loadgen", help="loadgen container name or id")
    ap.add_argument("--results", type=Path,
                    help="host folder mounted at /results in the loadgen container")
    ap.add_argument("--target", default=load.TARGET, help="base URL (default http://proxy)")
    ap.add_argument("--path", default="/single-4096/file.bin", help="file requested")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--locust-users", type=int, default=16)
    ap.add_argument("--allow-foreign-target", action="store_true")
    args = ap.parse_args(argv)
    if args.profile_cost:
        return profile_cost_main(args)
    if args.loadgen is None or args.results is None:
        ap.error("--loadgen and --results are required (but with --profile-cost)")
    os.environ["TIERBENCH_RESULTS"] = str(args.results.resolve())
    try:
        load.check_target(args.target, args.allow_foreign_target)
        gen = container(args.loadgen)
        work = Path(tempfile.mkdtemp(prefix="bench-", dir=results_root()))
        work.chmod(0o777)
        t0 = time.time()
        w = wrk_ratio(gen, args.target, args.path, args.connections, args.threads, args.seconds,
                      args.rounds, work)
        lo = locust_ratio(gen, args.target, args.path, args.locust_users, args.seconds,
                          args.rounds, work)
    except load.LoadgenError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    print(f"bench: target {args.target}{args.path}, loadgen {gen.name} (cpuset "
          f"{gen.cpuset or 'all'}), raw output in {work}, {time.time() - t0:.0f} s")
    print(f"wrk engine vs plain wrk ({args.connections} connections, {args.threads} threads, "
          f"{args.rounds} x {args.seconds} s alternated):")
    print("  plain wrk TPS:  " + ", ".join(f"{v:.0f}" for v in w["plain_tps"]))
    print("  wrk engine TPS: " + ", ".join(f"{v:.0f}" for v in w["engine_tps"]))
    print(f"  ratio of medians: {w['ratio']:.3f} (goal >= {GOAL})")
    print("  requests per loadgen CPU-s, plain: "
          + ", ".join(f"{v:.0f}" for v in w["plain_req_per_cpu_s"])
          + "; engine: " + ", ".join(f"{v:.0f}" for v in w["engine_req_per_cpu_s"])
          + f"; ratio of medians {w['cpu_ratio']:.3f} (goal >= {GOAL}; steadier than TPS on a "
          "shared host)")
    print(f"Locust engine vs bare FastHttpUser ({args.locust_users} users, 1 process, "
          f"{args.rounds} x {args.seconds} s alternated; requests / loadgen CPU-s):")
    for name in ("engine", "bare"):
        runs = ", ".join(f"{n}/{c:.2f}={n / c:.0f}" for n, c in lo[name])
        print(f"  {name + ':':7} {runs}; median {lo[name + '_req_per_cpu_s']:.0f} per CPU-s")
    print(f"  ratio: {lo['ratio']:.3f} (goal >= {GOAL})")
    (work / "bench.json").write_text(json.dumps({"wrk": w, "locust": lo}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
