"""The senders' kernel profile (NET-txprofile, 001): perf samples the senders' CPUs over the
measured window, and the profile's shares of 001's categories become the point's figures.

On one host perf runs here. On a cluster it runs on the `net_client` node over SSH (the senders
run there, with host networking): the check, the recording on the senders' CPUs (their cpusets
read on that node), and perf script / perf report there; only their text comes back."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from tierbench.config.errors import ConfigError
from tierbench.kinds.contract import PointContext
from tierbench.kinds.net import tools
from tierbench.measure.counters import MeasureError
from tierbench.measure.sampler import CgroupCpu
from tierbench.placement import model
from tierbench.transport import DEVNULL, LOCAL, CompletedProcess, Process, Transport, TransportError

PROFILE_HZ = 999
PROFILE_COLUMNS = ["prof_samples", "prof_write_pct", "prof_tcp_output_pct",
                   "prof_driver_tx_pct", "prof_ack_pct", "prof_idle_pct", "prof_tool_pct",
                   "prof_other_pct", "prof_write_pct_per_gbit", "prof_tcp_output_pct_per_gbit",
                   "prof_driver_tx_pct_per_gbit", "prof_ack_pct_per_gbit",
                   "prof_sender_samples", "prof_write_sender_pct", "prof_tcp_output_sender_pct",
                   "prof_driver_tx_sender_pct", "prof_ack_sender_pct"]


SENDER_ROLE = "net_client"  # the cluster role the senders run on
PERF_DIR = "perf"  # under this checkout's folder on the sender node, removed after a point
# What perf_check runs (here, or on the sender node): perf's presence, a 0.1 s system-wide
# recording of the CPU clock (its first error line), and the first 50 lines of /proc/kallsyms.
# Its error output goes to a private folder (mktemp -d), never a fixed name in the shared /tmp.
PERF_PROBE = ("command -v perf >/dev/null 2>&1 || { echo NO-PERF; exit 0; }; "
              "d=$(mktemp -d) || exit 1; "
              "perf record -q -e cpu-clock -a -g -o /dev/null -- sleep 0.1 >/dev/null "
              "2>\"$d/err\" && echo RECORD-OK || "
              "{ echo RECORD-FAILED; head -n 1 \"$d/err\"; }; "
              "rm -rf \"$d\"; echo KALLSYMS; head -n 50 /proc/kallsyms")


@dataclass
class Profiler:
    """perf record under way for one point on the senders' host (``via``: here, or the sender
    node, where ``remote`` is the folder holding perf.data)."""

    proc: Process
    via: Transport = LOCAL
    remote: str | None = None


def run_there(via: Transport, command: str, timeout: float) -> CompletedProcess:
    """``command`` on the senders' host, whatever its exit code; MeasureError naming the host
    when it cannot run there (ssh does not reach the node, the command does not finish)."""
    try:
        done = via.run(command, timeout=timeout)
    except TransportError as exc:
        raise MeasureError(f"{via.name or 'this host'}: `{command.split()[0]} ...`: "
                           f"{exc}") from None
    if via.unreachable(done):
        why = (done.stderr.strip().splitlines() or ["ssh exited with 255"])[-1][:200]
        raise MeasureError(f"{via.name}: cannot be reached over SSH: {why}")
    return done


def perf_problem(source: str, probe: str, where: str = "this host") -> str | None:
    """The one-sentence refusal PERF_PROBE's output calls for, or None when perf can profile
    (it samples the CPU clock system-wide and the kernel's symbol addresses are readable)."""
    lines = probe.splitlines()
    if not lines or lines[0].strip() == "NO-PERF":
        return (f"{source}: net.profile needs perf on {where} (Debian and Ubuntu: apt-get "
                "install linux-perf); nothing was run")
    if lines[0].strip() != "RECORD-OK":
        why = (lines[1].strip() if len(lines) > 1 and lines[1].strip() != "KALLSYMS"
               else "no reason given")[:200]
        return (f"{source}: net.profile: perf cannot sample the CPU clock on {where} ({why}); "
                "run as root with kernel.perf_event_paranoid <= 1, or drop net.profile; "
                "nothing was run")
    syms = lines[lines.index("KALLSYMS") + 1:] if "KALLSYMS" in lines else []
    if not any(line.split()[0].strip("0") for line in syms if line.strip()):
        return (f"{source}: net.profile: the kernel's symbol addresses are hidden on {where} "
                "(/proc/kallsyms reads zeros), so a profile could not name the kernel's "
                "functions; run as root with kernel.kptr_restrict <= 1; nothing was run")
    return None


def perf_check(source: str, via: Transport = LOCAL) -> None:
    """Refuse, with one sentence, a profile the senders' host ``via`` (this host, or the sender
    node over SSH) cannot take: no perf, perf that cannot sample the CPU clock of the whole
    system, or hidden kernel symbols."""
    try:
        probe = run_there(via, PERF_PROBE, timeout=60).stdout
    except MeasureError as exc:
        raise ConfigError(f"{source}: net.profile: {exc}; nothing was run") from None
    where = "this host" if not via.remote else f"node {via.name} (the senders' node, net_client)"
    found = perf_problem(source, probe, where)
    if found:
        raise ConfigError(found)


def perf_record_argv(cpus: str, seconds: float, out: str) -> list[str]:
    """perf record of the CPU clock with call graphs on ``cpus`` for ``seconds`` into ``out``."""
    return ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(PROFILE_HZ), "-g", "-C", cpus,
            "-o", out, "--", "sleep", str(seconds)]


def perf_text_argvs(data: str) -> tuple[list[str], list[str]]:
    """perf script (what the categories are counted from) and perf report (kept for people)."""
    return (["perf", "script", "-i", data, "-F", "comm,pid,cpu,ip,sym"],
            ["perf", "report", "-i", data, "--stdio", "--children", "--sort", "sym",
             "--percent-limit", "1", "-g", "none"])


def node_cpusets(via: Transport, pids: list[int]) -> str:
    """The CPUs the containers with these (node) PIDs may run on, read on their node: each main
    process's Cpus_allowed_list (its cpuset), comma-joined as a cpuset list reads."""
    script = "; ".join(f"grep -s '^Cpus_allowed_list:' /proc/{int(p)}/status" for p in pids)
    out = run_there(via, script + "; true", timeout=60).stdout
    return ",".join(dict.fromkeys(line.split(":", 1)[1].strip() for line in out.splitlines()
                                  if line.startswith("Cpus_allowed_list:")))


def start(ctx: PointContext, senders: list[model.Container], seconds: float) -> Profiler:
    """perf record (cpu-clock, call graphs) on the senders' CPUs for `seconds`: here, or on
    the sender node over SSH (into WORKDIR/PROJECT/perf/<run>-<point> there: this checkout's
    folder, Placer.folder)."""
    where = ctx.deployment.placer
    via = where.transport(senders[0])
    log_file = (ctx.dir / "perf-record.log").open("w")
    if not via.remote:
        cpus = ",".join(dict.fromkeys(c for s in senders if (c := CgroupCpu(s.pid).cpus())))
        ctx.record["profile"] = {"cpus": cpus, "hz": PROFILE_HZ, "event": "cpu-clock",
                                 "seconds": seconds}
        return Profiler(LOCAL.popen(perf_record_argv(cpus, seconds, str(ctx.dir / "perf.data")),
                                    stdout=DEVNULL, stderr=log_file))
    cpus = node_cpusets(via, [s.pid for s in senders if s.node == via.name])
    if not cpus:
        raise MeasureError(f"{via.name}: the senders' CPUs could not be read there "
                           "(/proc/PID/status), so perf has nothing to sample")
    remote = (f"{where.folder(SENDER_ROLE)}/{PERF_DIR}/"
              f"{ctx.dir.parent.parent.name}-{ctx.dir.name}")
    ctx.record["profile"] = {"cpus": cpus, "hz": PROFILE_HZ, "event": "cpu-clock",
                             "seconds": seconds, "node": via.name}
    script = (f"mkdir -p {shlex.quote(remote)} && exec "
              + shlex.join(perf_record_argv(cpus, seconds, f"{remote}/perf.data")))
    return Profiler(via.popen(script, stdout=DEVNULL, stderr=log_file, stdin=DEVNULL),
                    via, remote)


def profile_texts(ctx: PointContext, profiler: Profiler) -> tuple[str, str]:
    """Wait for perf record, then perf script's and perf report's text (on the sender node for
    a cluster: run there, the text copied back, perf.data removed there)."""
    profiler.proc.wait(timeout=120)
    via, remote = profiler.via, profiler.remote
    script_argv, report_argv = perf_text_argvs(f"{remote}/perf.data" if remote
                                               else str(ctx.dir / "perf.data"))
    try:
        script = run_there(via, shlex.join(script_argv) + " 2>/dev/null", timeout=600)
        report = run_there(via, shlex.join(report_argv) + " 2>/dev/null", timeout=600)
    finally:
        if remote:  # start() gives a node's profiler its folder there
            run_there(via, f"rm -rf {shlex.quote(remote)}", timeout=60)
    return script.stdout, report.stdout


def finish(ctx: PointContext, profiler: Profiler, tool: str,
           mbit_per_s: float) -> dict[str, Any]:
    """Wait for perf, then the inclusive shares of 001's categories (perf script kept as
    perf-script.txt, perf report as perf-report.txt)."""
    script, report = profile_texts(ctx, profiler)
    (ctx.dir / "perf-script.txt").write_text(script)
    (ctx.dir / "perf-report.txt").write_text(report)
    prof = tools.parse_perf_script(script, ({"iperf2": "iperf"}.get(tool, tool),))
    ctx.record["profile"]["top"] = prof["top"]
    gbit = mbit_per_s / 1000
    out: dict[str, Any] = {"prof_samples": prof["samples"],
                           "prof_sender_samples": prof["sender_samples"]}
    for cat in ("write", "tcp_output", "driver_tx", "ack", "idle", "tool", "other"):
        out[f"prof_{cat}_pct"] = prof[f"{cat}_pct"]
    for cat in ("write", "tcp_output", "driver_tx", "ack"):
        out[f"prof_{cat}_sender_pct"] = prof[f"{cat}_sender_pct"]
    for cat in ("write", "tcp_output", "driver_tx", "ack"):
        out[f"prof_{cat}_pct_per_gbit"] = prof[f"{cat}_pct"] / gbit if gbit > 0 else None
    return out



def version(via: Transport) -> str:
    """perf's version on the senders' host (here, or the sender node)."""
    done = run_there(via, "perf --version", timeout=30)
    return done.stdout.strip() or "unknown"
