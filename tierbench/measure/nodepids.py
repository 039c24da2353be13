"""The processes of each tier's cgroup on a cluster node, from each container's main process
(``--profile categories`` maps perf's samples to tiers by PID: tierbench.measure.profile).

It runs there from tierbench's node bundle (:mod:`tierbench.nodeapp`): ``python3 -I BUNDLE pids
MAINS``, MAINS the JSON ``[[tier, pid], ...]``, printing the JSON ``{pid: tier}``; a process that
is gone gives nothing. Standard library and tierbench.cgroups only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tierbench.cgroups import folder


def tier_pids(mains: list[tuple[str, int]]) -> dict[str, str]:
    """{pid: tier} of every process in the cgroup (cpuacct) of each tier's main process."""
    out: dict[str, str] = {}
    for tier, pid in mains:
        try:
            found = folder(Path(f"/proc/{int(pid)}/cgroup").read_text().splitlines(), "cpuacct")
            pids = (found[1] / "cgroup.procs").read_text().split() if found else [str(pid)]
        except OSError:
            continue
        out.update({p: tier for p in pids})
    return out


def main(args: list[str]) -> int:
    """``pids MAINS`` (see the module's doc)."""
    if len(args) != 1:
        print("usage: python3 -I BUNDLE pids MAINS_JSON", file=sys.stderr)
        return 2
    print(json.dumps(tier_pids(json.loads(args[0]))))
    return 0
