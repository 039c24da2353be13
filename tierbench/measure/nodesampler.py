"""The sampling agent's side on a node (tierbench/measure/agent.py starts it there and merges
what it prints): one JSON line per tick of the node's /proc/stat, the CPU counters of the
containers it was given (by PID on the node) and its interfaces' counters, with the kernel's
counters, read by the same code as on one host (:mod:`tierbench.measure.sampler`).

It runs from tierbench's node bundle (:mod:`tierbench.nodeapp`): ``python3 -I BUNDLE sample
CONFIG``, CONFIG the JSON of :func:`serve`'s ``config``. It imports only the standard library and
modules of the bundle.
"""

from __future__ import annotations

import json
import os
import select
import sys
import time
from pathlib import Path
from typing import Any

from tierbench.measure.sampler import (CgroupCpu, SamplerError, host_cpu, iface_counters,
                                       kernel_counters, tier_stacks)


def boot_id() -> str:
    """This kernel's boot id: nodes that share a kernel (containers) have the same one."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


class Lines:
    """Lines from a file descriptor, waiting at most a given time (select on the descriptor,
    our own buffer: a text file's buffer would hide lines from select)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf, self.closed = fd, b"", False

    def next(self, timeout: float | None) -> str | None:
        """The next line ('' once the input closed), or None when none came in time."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buf and not self.closed:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.fd], [], [], left)[0]:
                return None
            chunk = os.read(self.fd, 4096)
            if chunk:
                self.buf += chunk
            else:
                self.closed = True
        if b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            return line.decode()
        return ""


def serve(config: dict[str, Any], fd: int = 0, out: Any = None) -> None:
    """The agent's loop on the node (see the module's doc). ``config``: containers (label ->
    PID on the node), ifaces (label -> interface name), interval (s)."""
    out = out or sys.stdout
    counters: dict[str, Any] = {}
    gone: dict[str, str] = {}
    for label, pid in config.get("containers", {}).items():
        try:
            counters[label] = CgroupCpu(int(pid))
        except (OSError, SamplerError, ValueError) as exc:
            gone[label] = str(exc)
    ifaces = config.get("ifaces", {})
    interval = float(config.get("interval", 1.0))
    lines = Lines(fd)

    def emit(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    def sample(k: Any, offset: float) -> dict[str, Any]:
        s: dict[str, Any] = {"k": k, "t": time.time() - offset, "host": host_cpu(),
                             "cpu": {}, "net": {}}
        for label, cg in counters.items():
            try:
                s["cpu"][label] = cg.read()
            except OSError:
                s.setdefault("gone", []).append(label)
        for label, ifname in ifaces.items():
            try:
                s["net"][label] = iface_counters(ifname)
            except OSError:
                s.setdefault("gone", []).append(label)
        s.update(kernel_counters(ifaces))
        s["stack"].update(tier_stacks(counters))
        return s

    emit({"ready": time.time(), "boot_id": boot_id(), "gone": gone})
    line = lines.next(None)
    if not line or not line.startswith("t0 "):
        return
    _, t0_text, offset_text = line.split()
    t0, offset = float(t0_text), float(offset_text)
    k = 0
    while True:
        due = t0 + k * interval + offset  # the controller's tick k, on this node's clock
        line = lines.next(max(0.0, due - time.time()))
        if line is None:  # the tick is due
            emit(sample(k, offset))
            k = max(k + 1, int((time.time() - offset - t0) / interval) + 1)  # skip missed ticks
        elif line.strip() == "now":
            emit(sample("now", offset))
        else:  # "stop", or the input closed
            emit(sample("final", offset))
            return


def main(args: list[str]) -> int:
    """``sample CONFIG``: serve() with the JSON ``CONFIG`` until the input closes."""
    if len(args) != 1:
        print("usage: python3 -I BUNDLE sample CONFIG_JSON", file=sys.stderr)
        return 2
    serve(json.loads(args[0]))
    return 0
