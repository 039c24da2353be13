"""The node side of the rollback guard (a dead-man switch): a small detached process that puts a
mode's settings back by itself unless the controller keeps renewing it.

Standard library only, and nothing of tierbench: :mod:`tierbench.modes.guard` runs this file's
source with ``python3 -c SOURCE arm`` over the node's transport (on one host: here), giving the
plan on standard input as JSON: ``{"timeout_s": 30, "commands": [{"argv": [...], "what": ...,
"pid": PID or null, "netns_ino": inode or null, "enter": true}, ...]}``. ``arm`` makes a private folder
(mode 0700, ``mkdtemp`` under /run) holding the plan (``plan.json``, the restore commands as
data: argv lists, never shell strings) and the heartbeat file, prints the folder, detaches
(double fork, its own session, SIGHUP ignored: it outlives the SSH session and the controller)
and then watches:

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
import subprocess
import sys
import tempfile
import time

POLL_S = 0.5
COMMAND_TIMEOUT_S = 30
PREFIX = "tierbench-guard."


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
    this interpreter."""
    argv = [sys.executable if a == "python3" and i == 0 else str(a)
            for i, a in enumerate(entry["argv"])]
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
            done = subprocess.run(argv, capture_output=True, text=True, check=False,
                                  timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL)
            rc, err = done.returncode, " ".join((done.stderr or done.stdout or "").split())
        except (OSError, subprocess.TimeoutExpired) as exc:
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


def arm(plan: dict, base: str = "/run") -> str:
    """The private folder with the plan and a fresh heartbeat (printed for the controller)."""
    folder = tempfile.mkdtemp(prefix=PREFIX, dir=base)  # mode 0700, a fresh unguessable name
    with open(os.path.join(folder, "plan.json"), "w", encoding="utf-8") as fh:
        json.dump(plan, fh)
    with open(os.path.join(folder, "heartbeat"), "w", encoding="utf-8"):
        pass
    return folder


def detach(folder: str) -> bool:
    """Double fork into a session of its own with no terminal; True in the watcher."""
    sys.stdout.flush()
    if os.fork() > 0:
        return False
    os.setsid()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if os.fork() > 0:
        os._exit(0)
    fd = os.open(os.devnull, os.O_RDWR)
    err = os.open(os.path.join(folder, "agent.err"), os.O_WRONLY | os.O_CREAT, 0o600)
    os.dup2(fd, 0)
    os.dup2(fd, 1)
    os.dup2(err, 2)
    os.chdir("/")
    return True


def main(args: list[str]) -> int:
    if args[:1] != ["arm"]:
        print("usage: deadman.py arm [BASE] < plan.json", file=sys.stderr)
        return 2
    plan = json.load(sys.stdin)
    folder = arm(plan, args[1] if len(args) > 1 else "/run")
    print(folder, flush=True)
    if detach(folder):
        try:
            watch(folder, plan)
        finally:
            os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
