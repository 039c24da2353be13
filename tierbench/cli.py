"""The tierbench command: run, plan and clean experiments on the Compose stack; inspect modes."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from analysis import compare, load, report
from tierbench import config, loadgen, metrics, modes, netif, pfs, runner, stack
from workloads import filesets, traces, worldcup

USER_ERRORS = (config.ConfigError, modes.ConfigError, stack.StackError, netif.NetifError,
               loadgen.LoadgenError,
               metrics.MetricsError, filesets.FilesetError, traces.TraceError, load.LayoutError,
               worldcup.WorldCupError, pfs.PfsError)


def cmd_run(args: argparse.Namespace) -> int:
    """Run an experiment and write its results and report."""
    exp = config.load_experiment(args.experiment)
    stack.preflight()
    run = pfs.PfsRun(exp) if isinstance(exp, pfs.PfsExperiment) else runner.Run(exp)
    try:
        run_dir = run.execute()
    except runner.RunInterrupted as exc:
        print(f"tierbench: interrupted by {exc}: interfaces restored; partial results in "
              f"{run.dir}", file=sys.stderr)
        return 130
    print(f"tierbench: done: {run_dir / 'summary.csv'}\n"
          f"tierbench: report: {run_dir / 'report.html'}\n"
          "tierbench: the stack is still up; `tierbench clean` removes it")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    """Print the points of an experiment in run order and the estimated duration."""
    exp = config.load_experiment(args.experiment)
    plan = pfs.plan_lines if isinstance(exp, pfs.PfsExperiment) else runner.plan_lines
    print("\n".join(plan(exp)))
    return 0


def cmd_pfs(args: argparse.Namespace) -> int:
    """Bring the OrangeFS cluster up or down by hand, or list it."""
    if args.action == "up":
        stack.preflight()
        print(f"tierbench: starting 1 metadata + {args.io} I/O servers and {args.clients} "
              f"client(s), storage on {args.storage}", file=sys.stderr)
        pfs.cluster_up(args.io, args.clients, strip_size=args.strip_size, storage=args.storage,
                       job_timeout_s=args.job_timeout)
    elif args.action == "down":
        stack.down()
        print("tierbench: removed the stack and the OrangeFS cluster", file=sys.stderr)
        return 0
    print(pfs.status_json())
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    """Restore interface settings a crashed run left changed and remove the stack."""
    for note in runner.clean(keep_stack=args.keep_stack):
        print(f"tierbench: {note}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Write report.html for an existing run directory."""
    run_dir = Path(args.run)
    if not (run_dir / "summary.csv").is_file():
        raise config.ConfigError(f"{run_dir}: no summary.csv here; give a results/<experiment>/<run-id> folder")
    print(report.write_report(run_dir, load.stderr_progress("tierbench: report: samples")))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """Compare two runs of the same experiment; write the comparison page."""
    try:
        print(compare.write_compare(Path(args.run_a), Path(args.run_b), args.out))
    except (load.LayoutError, compare.CompareError) as exc:
        raise config.ConfigError(str(exc)) from None
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """Run Locust workers for a master on another node, again after every point, until Ctrl-C."""
    if args.processes < 1:
        raise loadgen.LoadgenError(f"--processes must be >= 1, got {args.processes}")
    cmd = loadgen.remote_worker_cmd(args.master, processes=args.processes, port=args.port,
                                    cpus=args.cpus, network=args.network,
                                    allow_foreign_target=args.allow_foreign_target)
    print(f"tierbench: {' '.join(cmd)}", file=sys.stderr)
    runs = 0
    while args.runs == 0 or runs < args.runs:
        # A worker exits when its master quits (end of a point); the next point needs a new one.
        code = subprocess.run(cmd, check=False).returncode
        runs += 1
        if code not in (0, 1):
            print(f"tierbench: worker exited with code {code}", file=sys.stderr)
            return code
        time.sleep(1)
    return 0


def parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = argparse.ArgumentParser(prog="tierbench", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run an experiment (name in experiments/ or a path)")
    r.add_argument("experiment")
    r.set_defaults(func=cmd_run)
    pl = sub.add_parser("plan", help="dry run: the points in order and the estimated duration")
    pl.add_argument("experiment")
    pl.set_defaults(func=cmd_plan)
    c = sub.add_parser("clean", help="restore interfaces left changed and remove the stack")
    c.add_argument("--keep-stack", action="store_true",
                   help="only restore interface settings; leave the containers running")
    c.set_defaults(func=cmd_clean)
    rp = sub.add_parser("report", help="(re)write report.html of a run directory")
    rp.add_argument("run")
    rp.set_defaults(func=cmd_report)
    modes.add_modes_parser(sub)
    pf = sub.add_parser("pfs", help="the OrangeFS cluster by hand: up, down, status")
    pf.add_argument("action", choices=("up", "down", "status"))
    pf.add_argument("--io", type=int, default=2, help="I/O servers, 1-8 (default 2)")
    pf.add_argument("--clients", type=int, default=1, help="client containers (default 1)")
    pf.add_argument("--storage", choices=pfs.STORAGE, default="tmpfs")
    pf.add_argument("--strip-size", type=int, default=65536, help="bytes (default 65536)")
    pf.add_argument("--job-timeout", type=int, default=15, help="seconds (default 15)")
    pf.set_defaults(func=cmd_pfs)
    w = sub.add_parser("worker", help="Locust workers on this node for a run's master on another "
                       "node (experiment key load.remote_workers)")
    w.add_argument("--master", required=True, help="address of the master's node (port 5557)")
    w.add_argument("--port", type=int, default=loadgen.MASTER_PORT)
    w.add_argument("--processes", type=int, default=1, help="worker processes (one core each)")
    w.add_argument("--cpus", help="cpuset of the worker container, e.g. 0-3")
    w.add_argument("--network", default="host", help="Docker network of the worker container")
    w.add_argument("--allow-foreign-target", action="store_true",
                   help="let these workers load a target outside 198.18.0.0/15")
    w.add_argument("--runs", type=int, default=0,
                   help="stop after this many worker runs (points); 0: until Ctrl-C")
    w.set_defaults(func=cmd_worker)
    cp = sub.add_parser("compare", help="compare two runs of the same experiment (A, then B)")
    cp.add_argument("run_a")
    cp.add_argument("run_b")
    cp.add_argument("-o", "--out", type=Path, help="output file (default RUN_B/compare-<A>.html)")
    cp.set_defaults(func=cmd_compare)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point: errors a user can fix are one line on stderr and exit code 2."""
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except USER_ERRORS as exc:
        print(f"tierbench: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tierbench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
