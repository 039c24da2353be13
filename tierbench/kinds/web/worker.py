"""`tierbench worker`: Locust workers on this node for a run's master on another node
(experiment key load.remote_workers), the web kind's subcommand (Kind.commands)."""

from __future__ import annotations

import argparse
import sys
import time

from tierbench.kinds.contract import Command
from tierbench.kinds.web import locust
from tierbench.kinds.web.load import LoadgenError
from tierbench.transport import run_argv


def arguments(w: argparse.ArgumentParser) -> None:
    """The subcommand's options."""
    w.add_argument("--master", required=True, help="address of the master's node (port 5557)")
    w.add_argument("--port", type=int, default=locust.MASTER_PORT)
    w.add_argument("--processes", type=int, default=1, help="worker processes (one core each)")
    w.add_argument("--cpus", help="cpuset of the worker container, e.g. 0-3")
    w.add_argument("--network", default="host", help="Docker network of the worker container")
    w.add_argument("--allow-foreign-target", action="store_true",
                   help="let these workers load a target outside 198.18.0.0/15")
    w.add_argument("--runs", type=int, default=0,
                   help="stop after this many worker runs (points); 0: until Ctrl-C")


def cmd_worker(args: argparse.Namespace) -> int:
    """Run Locust workers for a master on another node, again after every point, until Ctrl-C."""
    if args.processes < 1:
        raise LoadgenError(f"--processes must be >= 1, got {args.processes}")
    args.where.ensure_images(["tierbench-loadgen"])  # built here the first time
    cmd = locust.remote_worker_cmd(args.master, processes=args.processes, port=args.port,
                                    cpus=args.cpus, network=args.network,
                                    allow_foreign_target=args.allow_foreign_target)
    print(f"tierbench: {' '.join(cmd)}", file=sys.stderr)
    runs = 0
    while args.runs == 0 or runs < args.runs:
        # A worker exits when its master quits (end of a point); the next point needs a new one.
        code = run_argv(cmd, timeout=None, stdout=None, stderr=None).returncode
        runs += 1
        if code not in (0, 1):
            print(f"tierbench: worker exited with code {code}", file=sys.stderr)
            return code
        time.sleep(1)
    return 0


COMMAND = Command("worker", "Locust workers on this node for a run's master on another node "
                  "(experiment key load.remote_workers)", arguments, cmd_worker)
