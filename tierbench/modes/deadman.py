"""The node side of the rollback guard (a dead-man switch): a small detached process that puts a
mode's settings back by itself unless the controller keeps renewing it.

It imports only the standard library and tierbench.transport, and runs from tierbench's node
bundle (:mod:`tierbench.nodeapp`): :mod:`tierbench.modes.guard` puts the bundle in a private
folder on the node (mode 0700, ``mktemp -d`` under /run; on one host: here) and runs
``python3 -I FOLDER/tierbench-node.pyz deadman arm FOLDER PLAN`` over the node's transport, PLAN
the JSON ``{"timeout_s": 30, "commands": [{"argv": [...], "what": ..., "pid": PID or null,
"netns_ino": inode or null, "enter": true}, ...]}``. ``arm`` writes the plan (``plan.json``, the
restore commands as data: argv lists, never shell strings) and the heartbeat file into the
folder, starts the watcher detached (``deadman watch FOLDER``: a session of its own, no terminal,
SIGHUP ignored: it outlives the SSH session and the controller), prints the folder and returns.
The watcher then watches:

- the folder gone (``rm -rf``: the controller restored the point itself and disarmed): exit;
- the heartbeat's mtime older than ``timeout_s`` (the controller stopped renewing it: killed,
  its machine down, its SSH cut by the mode itself): run every restore command once (a command
  that fails is tried once more after the others, features depending on others), log each one
  to ``log``, write ``fired``, exit.

A command naming a process (``pid``) runs only while that PID is still in the network
namespace the snapshot saw (``netns_ino``): a container that stopped has nothing to restore,
and a reused PID is never entered; it runs in that namespace (``nsenter -n``) unless ``enter``
is false (a cgroup write names the process without entering it).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from tierbench.transport import DEVNULL, TransportError, run_argv, start_argv

POLL_S = 0.5
COMMAND_TIMEOUT_S = 30
PREFIX = "tierbench-guard."
# in a restore command's argv: the bundle this agent runs from (the CPU settings' restores run a
# program of it: tierbench.interfaces.cgroupcpu)
BUNDLE = "{tierbench-node.pyz}"


def still_there(entry: dict) -> bool:
    """Whether the process a command enters is still the one the snapshot saw."""
    pid = entry.get("pid")
    if pid is None:
        return True
    try:
        ino = os.stat(f"/proc/{int(pid)}/ns/net").st_ino
    except OSError:
        return False
    return entry.get("netns_ino") is None or ino == entry["netns_ino"]


def argv_of(entry: dict) -> list[str]:
    """The argv a command runs: in the namespace of its process when it names one; python3 is
    this interpreter, BUNDLE the bundle it runs from."""
    argv = [sys.executable if a == "python3" and i == 0 else sys.argv[0] if a == BUNDLE
            else str(a) for i, a in enumerate(entry["argv"])]
    pid = entry.get("pid")
    if pid is None or not entry.get("enter", True):
        return argv
    return ["nsenter", "-t", str(int(pid)), "-n", "--"] + argv


def run_commands(commands: list[dict], log: list[str]) -> list[dict]:
    """Run each command once; return those that failed (a gone process's are skipped)."""
    failed = []
    for entry in commands:
        what = entry.get("what", "")
        if not still_there(entry):
            log.append(f"{what}: gone, nothing to restore")
            continue
        argv = argv_of(entry)
        try:
            done = run_argv(argv, timeout=COMMAND_TIMEOUT_S, stdin=DEVNULL)
            rc, err = done.returncode, " ".join((done.stderr or done.stdout or "").split())
        except TransportError as exc:  # not startable, or did not finish
            rc, err = -1, str(exc)
        log.append(f"{what}: {' '.join(argv)} -> exit {rc}" + (f": {err[:300]}" if rc else ""))
        if rc != 0:
            failed.append(entry)
    return failed


def restore(commands: list[dict]) -> list[str]:
    """Run the restore commands, the failed ones once more after the others; the log lines."""
    log: list[str] = []
    failed = run_commands(commands, log)
    if failed:
        log.append(f"again, {len(failed)} command(s) that failed:")
        run_commands(failed, log)
    return log


def expired(heartbeat: str, timeout_s: float, now: float | None = None) -> bool | None:
    """True when ``heartbeat`` was last renewed more than ``timeout_s`` ago; None when it is
    gone (disarmed)."""
    try:
        mtime = os.stat(heartbeat).st_mtime
    except FileNotFoundError:
        return None
    return (time.time() if now is None else now) - mtime > timeout_s


def watch(folder: str, plan: dict) -> str:
    """Watch the heartbeat until disarmed ("disarmed") or expired ("fired": restored)."""
    heartbeat = os.path.join(folder, "heartbeat")
    while True:
        state = expired(heartbeat, float(plan["timeout_s"]))
        if state is None or not os.path.isdir(folder):
            return "disarmed"
        if state:
            lines = restore(plan["commands"])
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            try:
                with open(os.path.join(folder, "log"), "a", encoding="utf-8") as fh:
                    fh.write(f"{stamp} no renewal for {plan['timeout_s']} s: restoring\n")
                    fh.writelines(line + "\n" for line in lines)
                with open(os.path.join(folder, "fired"), "w", encoding="utf-8") as fh:
                    fh.write(f"{stamp} the node restored the settings itself "
                             f"({len(plan['commands'])} command(s))\n")
            except OSError:
                pass  # the folder was removed meanwhile: the restore ran all the same
            return "fired"
        time.sleep(POLL_S)


def arm(folder: str, plan: dict) -> None:
    """The plan and a fresh heartbeat written into the agent's private folder."""
    with open(os.path.join(folder, "plan.json"), "w", encoding="utf-8") as fh:
        json.dump(plan, fh)
    with open(os.path.join(folder, "heartbeat"), "w", encoding="utf-8"):
        pass


def detach(folder: str, bundle: str) -> None:
    """Start ``deadman watch FOLDER`` of the bundle in a session of its own, with no terminal
    and its errors in the folder's ``agent.err`` (it outlives this process and the SSH
    session)."""
    err = os.open(os.path.join(folder, "agent.err"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        start_argv([sys.executable, "-I", bundle, "deadman", "watch", folder], stdin=DEVNULL,
                   stdout=DEVNULL, stderr=err, start_new_session=True, cwd="/")
    finally:
        os.close(err)


def main(args: list[str]) -> int:
    """``arm FOLDER PLAN``: arm the agent in FOLDER (made by the guard) and start its watcher;
    ``watch FOLDER``: the watcher itself (run by ``arm``). The bundle is this program's
    ``sys.argv[0]``."""
    if len(args) == 3 and args[0] == "arm" and os.path.isdir(args[1]):
        arm(args[1], json.loads(args[2]))
        detach(args[1], sys.argv[0])
        print(args[1], flush=True)
        return 0
    if len(args) == 2 and args[0] == "watch":
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        with open(os.path.join(args[1], "plan.json"), encoding="utf-8") as fh:
            plan = json.load(fh)
        watch(args[1], plan)
        return 0
    print("usage: python3 -I BUNDLE deadman arm FOLDER PLAN_JSON | watch FOLDER",
          file=sys.stderr)
    return 2
