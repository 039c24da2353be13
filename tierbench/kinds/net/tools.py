"""The network kind's pure parts: command lines for iperf 2, iperf3 and sockperf built from a
point's parameters, parsers of their outputs into plain dicts, and counts of established TCP
connections from `ss`. Nothing here runs a process or reads a file; nothing imports tierbench.

Directions are named from the client's side: `client_to_server` (the client sends, the default
for every tool), `server_to_client` (iperf's -R), and both at once (`bi`: iperf 2's
--full-duplex, iperf3's --bidir). Throughput is always the bytes of the measured window (warm-up
excluded) over that window's length, in bits/s and bytes/s. A tool's own CPU figure (iperf3's
`cpu_utilization_percent`) covers its own process only; the runner measures CPU per side itself.

Every parser raises NetParseError with one sentence when the output is not what it expects
(an error the tool printed, a missing report, a malformed row); the tools themselves exit 0 on
most failures (iperf 2.1.8 after "connect failed", iperf3 3.12 with -J), so the parse is the check.
"""

from __future__ import annotations

import json
import re

CLIENT_TO_SERVER = "client_to_server"
SERVER_TO_CLIENT = "server_to_client"
DIRECTIONS = ("uni", "reverse", "bi")
IPERF_PORT = 5001
IPERF3_PORT = 5201
SOCKPERF_PORT = 11111
IPERF3_MAX_STREAMS = 128  # iperf3 3.12 refuses -P above 128
SOCKPERF_MIN_MESSAGE = 14  # sockperf 3.7: "'-m' Invalid message size: 4 (min: 14)"
TOOL_CPU_SCOPE = "the tool's own process only (utime+stime over wall time), not the host or the container"
_EPS = 1e-6


class NetParseError(ValueError):
    """A tool's output could not be read; the message is one sentence naming the cause."""


# ---------------------------------------------------------------------------------------------
# Command lines


def size_arg(n: int) -> str:
    """Bytes as iperf takes them: '64K' or '1M' when exact (K = 1024 for iperf 2 and iperf3)."""
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise ValueError(f"a size must be a positive number of bytes, not {n!r}")
    for unit, factor in (("M", 1 << 20), ("K", 1 << 10)):
        if n % factor == 0:
            return f"{n // factor}{unit}"
    return str(n)


def _check_common(target: str, port: int, streams: int, duration_s: float, warmup_s: float,
                  direction: str) -> None:
    if not target or any(c.isspace() for c in str(target)):
        raise ValueError(f"the target must be one address or host name, not {target!r}")
    if not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"the port must be 1-65535, not {port!r}")
    if not isinstance(streams, int) or isinstance(streams, bool) or streams < 1:
        raise ValueError(f"streams must be a whole number >= 1, not {streams!r}")
    if not duration_s > 0:
        raise ValueError(f"the measured duration must be > 0 s, not {duration_s!r}")
    if warmup_s < 0:
        raise ValueError(f"the warm-up must be >= 0 s, not {warmup_s!r}")
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, not {direction!r}")


def _seconds(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def iperf2_command(target: str, *, port: int = IPERF_PORT, streams: int = 1,
                   duration_s: float = 10, warmup_s: float = 0, interval_s: float = 1,
                   write_size: int | None = None, window: int | None = None,
                   direction: str = "uni", nodelay: bool = False) -> list[str]:
    """iperf 2 client: CSV reports every `interval_s`, run for warm-up + duration.

    iperf 2 has no omit option, so it runs `warmup_s + duration_s` and `parse_iperf2_csv(...,
    warmup_s=...)` drops the interval rows that start inside the warm-up; the warm-up must be a
    whole number of intervals. `direction`: uni (client sends), reverse (-R), bi (--full-duplex,
    both ways on the same sockets)."""
    _check_common(target, port, streams, duration_s, warmup_s, direction)
    if not interval_s > 0:
        raise ValueError(f"the report interval must be > 0 s, not {interval_s!r}")
    ratio = warmup_s / interval_s
    if abs(ratio - round(ratio)) > _EPS:
        raise ValueError(f"the warm-up ({warmup_s} s) must be a whole number of report intervals "
                         f"({interval_s} s) so that whole intervals can be dropped")
    return (["iperf", "-c", str(target), "-p", str(port), "-t", _seconds(warmup_s + duration_s),
             "-i", _seconds(interval_s), "-P", str(streams), "-y", "C"]
            + _sizes(write_size, window) + (["-N"] if nodelay else [])
            + _direction(direction, "--full-duplex"))


def _sizes(write_size: int | None, window: int | None) -> list[str]:
    """iperf's and iperf3's write size (-l) and socket buffer (-w) options."""
    return ((["-l", size_arg(write_size)] if write_size is not None else [])
            + (["-w", size_arg(window)] if window is not None else []))


def _direction(direction: str, both_ways: str) -> list[str]:
    """-R for reverse, ``both_ways`` (iperf's --full-duplex, iperf3's --bidir) for bi."""
    return {"reverse": ["-R"], "bi": [both_ways]}.get(direction, [])


def iperf3_command(target: str, *, port: int = IPERF3_PORT, streams: int = 1,
                   duration_s: float = 10, warmup_s: float = 0, interval_s: float = 1,
                   write_size: int | None = None, window: int | None = None,
                   direction: str = "uni", zerocopy: bool = False) -> list[str]:
    """iperf3 client with JSON output: -t is the measured time, -O the omitted warm-up before it
    (so it runs warm-up + duration), -R for reverse, --bidir for both ways. One iperf3 3.12
    process is one thread and runs at most 128 streams: more connections need more processes,
    each to its own server port."""
    _check_common(target, port, streams, duration_s, warmup_s, direction)
    if streams > IPERF3_MAX_STREAMS:
        raise ValueError(f"iperf3 3.12 runs at most {IPERF3_MAX_STREAMS} streams per process, not "
                         f"{streams}: split them over several processes and server ports")
    if not float(warmup_s).is_integer():
        raise ValueError(f"iperf3 omits whole seconds (-O), so the warm-up must be whole, not "
                         f"{warmup_s!r}")
    cmd = ["iperf3", "-c", str(target), "-p", str(port), "-t", _seconds(duration_s),
           "-i", _seconds(interval_s), "-P", str(streams), "-J"]
    if warmup_s:
        cmd += ["-O", _seconds(warmup_s)]
    return (cmd + _sizes(write_size, window) + (["-Z"] if zerocopy else [])
            + _direction(direction, "--bidir"))


def sockperf_command(target: str, *, port: int = SOCKPERF_PORT, mode: str = "ping-pong",
                     message_size: int = 64, duration_s: float = 10, mps: int | None = None,
                     full_rtt: bool = False) -> list[str]:
    """sockperf TCP client: `ping-pong` (one message in flight, latency of every reply) or
    `under-load` (messages at `mps` per second, latency of the sampled replies). sockperf reports
    half the round trip unless `full_rtt`; it warms up for 400 ms and reports percentiles over
    its own "valid duration", a little shorter than `duration_s`. Messages are >= 14 bytes."""
    _check_common(target, port, 1, duration_s, 0, "uni")
    if mode not in ("ping-pong", "under-load"):
        raise ValueError(f"the sockperf mode must be ping-pong or under-load, not {mode!r}")
    if not isinstance(message_size, int) or message_size < SOCKPERF_MIN_MESSAGE:
        raise ValueError(f"sockperf 3.7 sends messages of at least {SOCKPERF_MIN_MESSAGE} bytes, "
                         f"not {message_size!r}")
    cmd = ["sockperf", mode, "--tcp", "-i", str(target), "-p", str(port), "-m", str(message_size),
           "-t", _seconds(duration_s)]
    if mps is not None:
        if not isinstance(mps, int) or mps < 1:
            raise ValueError(f"messages per second must be a whole number >= 1, not {mps!r}")
        cmd.append(f"--mps={mps}")
    elif mode == "under-load":
        raise ValueError("sockperf under-load needs a rate: give mps (messages per second)")
    if full_rtt:
        cmd.append("--full-rtt")
    return cmd


# ---------------------------------------------------------------------------------------------
# iperf 2


_IPERF2_ROW = re.compile(
    r"^(?P<ts>\d{14}(?:\.\d+)?),(?P<src>[^,]*),(?P<sport>\d+),(?P<dst>[^,]*),(?P<dport>\d+),"
    r"(?P<id>-?\d+),(?P<start>[\d.]+)-(?P<end>[\d.]+),(?P<bytes>\d+),(?P<bps>\d+)$")


def _rate(nbytes: float, seconds: float) -> dict:
    bps = nbytes / seconds if seconds > 0 else 0.0
    return {"bytes": int(nbytes), "seconds": seconds, "bytes_per_second": bps,
            "bits_per_second": bps * 8}


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if any(c.isalnum() for c in line):
            return line.strip()[:200]
    return "(nothing)"


def parse_iperf2_csv(text: str, *, warmup_s: float = 0, server_port: int = IPERF_PORT) -> dict:
    """iperf 2's client CSV (-y C) into throughput per direction over the measured window.

    Each row is source, destination, transfer id, interval, bytes, bits/s; the source is the
    side that sent the data, so rows whose source port is `server_port` are server-to-client
    (-R, --full-duplex). The last row of each stream is its whole-run total; the others are
    interval rows. With interval rows, the measured window is every interval starting at or after
    `warmup_s`; without them (no -i) it is the totals, and a warm-up cannot be dropped.

    Returns: tool, warmup_s; directions: {direction: {streams, bytes, seconds, bytes_per_second,
    bits_per_second, window: [start, end]}}; bytes/bytes_per_second/bits_per_second summed over
    directions; intervals (one row per interval and direction, streams summed: iperf 2.1.8 CSV
    prints no SUM rows); stream_totals (each stream's own total row); messages (any non-CSV
    lines the tool printed, such as "tcp write failed: Broken pipe"); retransmits None (the CSV
    does not carry them)."""
    rows, messages = [], []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        m = _IPERF2_ROW.match(line)
        if m is None:
            if line.count(",") >= 8 and line[:1].isdigit():
                raise NetParseError(f"iperf 2 printed a CSV row this parser cannot read: {line!r}")
            messages.append(line)
            continue
        direction = SERVER_TO_CLIENT if int(m["sport"]) == server_port else CLIENT_TO_SERVER
        rows.append({"stream": int(m["id"]), "direction": direction,
                     "source": f"{m['src']}:{m['sport']}", "destination": f"{m['dst']}:{m['dport']}",
                     "start": float(m["start"]), "end": float(m["end"]), "bytes": int(m["bytes"]),
                     "bits_per_second": int(m["bps"])})
    if not rows:
        raise NetParseError(f"iperf 2 printed no CSV report (was -y C given?); it said: "
                            f"{_first_line(text)!r}")
    by_stream: dict[tuple, list[dict]] = {}
    for row in rows:
        by_stream.setdefault((row["stream"], row["direction"]), []).append(row)
    totals, intervals = [], []
    for key, stream_rows in by_stream.items():
        total = stream_rows[-1]
        if total["start"] > _EPS:
            raise NetParseError(f"iperf 2 stream {key[0]} ({key[1]}) has no whole-run total row "
                                f"(its last row covers {total['start']}-{total['end']} s): the run "
                                "was cut short")
        totals.append(total)
        intervals.extend(stream_rows[:-1])
    if warmup_s > 0 and not intervals:
        raise NetParseError(f"iperf 2 printed no interval rows, so the {warmup_s} s warm-up "
                            "cannot be dropped: run it with -i")
    summed: dict[tuple, dict] = {}
    for row in intervals:
        key = (row["start"], row["end"], row["direction"])
        cell = summed.setdefault(key, {"start": row["start"], "end": row["end"],
                                       "direction": row["direction"], "streams": 0, "bytes": 0})
        cell["streams"] += 1
        cell["bytes"] += row["bytes"]
    for cell in summed.values():
        cell.update(_rate(cell["bytes"], cell["end"] - cell["start"]))
    directions = {}
    for direction in (CLIENT_TO_SERVER, SERVER_TO_CLIENT):
        streams = [t for t in totals if t["direction"] == direction]
        if not streams:
            continue
        if intervals:
            kept = [r for r in intervals
                    if r["direction"] == direction and r["start"] >= warmup_s - _EPS]
            if not kept:
                last = max(r["end"] for r in intervals if r["direction"] == direction)
                raise NetParseError(f"iperf 2's run ({last} s) ended within the {warmup_s} s "
                                    "warm-up: nothing is left to measure")
            start, end = min(r["start"] for r in kept), max(r["end"] for r in kept)
            nbytes = sum(r["bytes"] for r in kept)
        else:
            start, end = 0.0, max(t["end"] for t in streams)
            nbytes = sum(t["bytes"] for t in streams)
        directions[direction] = {"streams": len(streams), **_rate(nbytes, end - start),
                                 "window": [start, end]}
    out = {"tool": "iperf2", "warmup_s": warmup_s, "directions": directions,
           "intervals": sorted(summed.values(), key=lambda c: (c["start"], c["direction"])),
           "stream_totals": totals, "messages": messages, "retransmits": None}
    out.update(_sum_directions(directions))
    return out


def _sum_directions(directions: dict) -> dict:
    return {"bytes": sum(d["bytes"] for d in directions.values()),
            "bytes_per_second": sum(d["bytes_per_second"] for d in directions.values()),
            "bits_per_second": sum(d["bits_per_second"] for d in directions.values())}


# ---------------------------------------------------------------------------------------------
# iperf3


def parse_iperf3_json(text: str) -> dict:
    """iperf3's JSON report (-J) into throughput per direction.

    iperf3 already leaves the omitted warm-up (-O) out of its end sums; throughput is the
    receiving side's bytes over its seconds (what arrived), retransmits are the sender's.
    Returns: tool, version, streams, warmup_s (the omit), duration_s, directions: {direction:
    {bytes, seconds, bytes_per_second, bits_per_second, bytes_sent, retransmits}},
    bytes/bytes_per_second/bits_per_second summed over directions, retransmits (sum, None when
    not reported), intervals (per interval and direction: start, end, seconds, bytes,
    bits_per_second, retransmits, omitted), socket buffer sizes, tool_cpu (iperf3's own
    cpu_utilization_percent: `local_*` is this client's process, `remote_*` the server's
    process, labelled with `scope`)."""
    try:
        data = json.loads(text)
    except ValueError:
        raise NetParseError(f"iperf3 output is not JSON (was -J given?); it begins "
                            f"{_first_line(text)!r}") from None
    if not isinstance(data, dict):
        raise NetParseError("iperf3 output is JSON but not an iperf3 report (not an object)")
    if data.get("error"):
        raise NetParseError(f"iperf3 reported an error: {data['error']}")
    start, end = data.get("start") or {}, data.get("end") or {}
    test = start.get("test_start") or {}
    if "sum_received" not in end or "sum_sent" not in end:
        raise NetParseError("iperf3's report has no end sums (sum_sent, sum_received): the test "
                            "did not finish")
    reverse, bidir = bool(test.get("reverse")), "sum_received_bidir_reverse" in end
    forward = SERVER_TO_CLIENT if reverse else CLIENT_TO_SERVER
    pairs = [(forward, end["sum_sent"], end["sum_received"])]
    if bidir:
        pairs.append((SERVER_TO_CLIENT, end["sum_sent_bidir_reverse"],
                      end["sum_received_bidir_reverse"]))
    directions = {}
    for direction, sent, received in pairs:
        try:
            directions[direction] = {**_rate(received["bytes"], received["seconds"]),
                                     "bytes_sent": sent["bytes"],
                                     "retransmits": sent.get("retransmits")}
        except (KeyError, TypeError):
            raise NetParseError(f"iperf3's end sums for {direction} lack bytes or seconds") from None
    intervals = []
    for i, interval in enumerate(data.get("intervals") or []):
        for key in ("sum", "sum_bidir_reverse"):
            s = interval.get(key)
            if s is None:
                continue
            try:
                direction = CLIENT_TO_SERVER if s["sender"] else SERVER_TO_CLIENT
                intervals.append({"direction": direction, "start": s["start"], "end": s["end"],
                                  "seconds": s["seconds"], "bytes": s["bytes"],
                                  "bits_per_second": s["bits_per_second"],
                                  "retransmits": s.get("retransmits"),
                                  "omitted": bool(s.get("omitted"))})
            except KeyError as missing:
                raise NetParseError(f"iperf3 interval {i + 1} lacks {missing}") from None
    retrans = [d["retransmits"] for d in directions.values() if d["retransmits"] is not None]
    cpu = end.get("cpu_utilization_percent") or {}
    tool_cpu = None
    if cpu:
        tool_cpu = {"scope": TOOL_CPU_SCOPE,
                    **{f"local_{k[5:]}_percent": v for k, v in cpu.items() if k.startswith("host_")},
                    **{f"remote_{k[7:]}_percent": v for k, v in cpu.items()
                       if k.startswith("remote_")}}
    out = {"tool": "iperf3", "version": start.get("version"),
           "streams": test.get("num_streams"), "warmup_s": test.get("omit", 0),
           "duration_s": test.get("duration"), "write_size": test.get("blksize"),
           "socket_buffer": start.get("sock_bufsize"), "sndbuf_actual": start.get("sndbuf_actual"),
           "rcvbuf_actual": start.get("rcvbuf_actual"), "directions": directions,
           "retransmits": sum(retrans) if retrans else None, "intervals": intervals,
           "tool_cpu": tool_cpu}
    out.update(_sum_directions(directions))
    return out


# ---------------------------------------------------------------------------------------------
# sockperf


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SOCKPERF_VALID = re.compile(r"\[Valid Duration\] RunTime=([\d.]+) sec; SentMessages=(\d+); "
                             r"ReceivedMessages=(\d+)")
_SOCKPERF_TOTAL = re.compile(r"\[Total Run\] RunTime=([\d.]+) sec; Warm up time=(\d+) msec; "
                             r"SentMessages=(\d+); ReceivedMessages=(\d+)")
_SOCKPERF_AVG = re.compile(r"====> avg-(latency|rtt)=([\d.]+) \(std-dev=([\d.]+)\)")
_SOCKPERF_PCT = re.compile(r"---> percentile ([\d.]+) = +([\d.]+)")
_SOCKPERF_MINMAX = re.compile(r"---> <(MAX|MIN)> observation = +([\d.]+)")
_SOCKPERF_OBS = re.compile(r"Total (\d+) observations")
_SOCKPERF_QUALITY = re.compile(r"# dropped messages = (\d+); # duplicated messages = (\d+); "
                               r"# out-of-order messages = (\d+)")


def _percentile_key(p: str) -> str:
    return f"{float(p):g}"


def parse_sockperf(text: str) -> dict:
    """sockperf ping-pong or under-load client output into latency statistics, in microseconds.

    `metric` is `latency` (sockperf's default: half the round trip) or `rtt` (--full-rtt).
    Returns: tool, metric, unit ('usec'), avg, std_dev, min, max, percentiles ({'25': .., '50':
    .., '99.9': .., ...} as sockperf prints them), observations, valid_seconds, sent_messages,
    received_messages (of the valid duration, sockperf's warm-up and tail excluded),
    total_run_seconds, total_sent_messages, total_received_messages (the whole run, warm-up
    included), warmup_ms, dropped, duplicated, out_of_order."""
    clean = _ANSI.sub("", text)
    errors = [line.split("ERROR:", 1)[1].strip() for line in clean.splitlines() if "ERROR:" in line]
    if errors:
        raise NetParseError(f"sockperf failed: {errors[0]}")
    bad = re.search(r"sockperf: (.*Invalid.*)", clean)
    if bad:
        raise NetParseError(f"sockperf refused its arguments: {bad.group(1).strip()}")
    avg, valid = _SOCKPERF_AVG.search(clean), _SOCKPERF_VALID.search(clean)
    percentiles = {_percentile_key(p): float(v) for p, v in _SOCKPERF_PCT.findall(clean)}
    if avg is None or valid is None or not percentiles:
        raise NetParseError("sockperf printed no latency summary (no avg, valid duration or "
                            f"percentiles); it said: {_first_line(clean)!r}")
    minmax = dict(_SOCKPERF_MINMAX.findall(clean))
    obs, total, quality = (_SOCKPERF_OBS.search(clean), _SOCKPERF_TOTAL.search(clean),
                           _SOCKPERF_QUALITY.search(clean))
    return {"tool": "sockperf", "metric": avg.group(1), "unit": "usec",
            "avg": float(avg.group(2)), "std_dev": float(avg.group(3)),
            "min": float(minmax["MIN"]) if "MIN" in minmax else None,
            "max": float(minmax["MAX"]) if "MAX" in minmax else None,
            "percentiles": percentiles,
            "observations": int(obs.group(1)) if obs else int(valid.group(3)),
            "valid_seconds": float(valid.group(1)), "sent_messages": int(valid.group(2)),
            "received_messages": int(valid.group(3)),
            "total_run_seconds": float(total.group(1)) if total else None,
            "total_sent_messages": int(total.group(3)) if total else None,
            "total_received_messages": int(total.group(4)) if total else None,
            "warmup_ms": int(total.group(2)) if total else None,
            "dropped": int(quality.group(1)) if quality else None,
            "duplicated": int(quality.group(2)) if quality else None,
            "out_of_order": int(quality.group(3)) if quality else None}


# ---------------------------------------------------------------------------------------------
# ss and combining runs


_SS_STATES = {"ESTAB", "SYN-SENT", "SYN-RECV", "FIN-WAIT-1", "FIN-WAIT-2", "TIME-WAIT", "CLOSE",
              "CLOSE-WAIT", "LAST-ACK", "LISTEN", "CLOSING", "UNCONN"}


def _ss_established(text: str) -> list[list[str]]:
    """Rows of established connections from `ss -Htn state established` (no State column) or
    plain `ss -tn` / `ss -Htn` (State column, header line skipped; only ESTAB rows kept)."""
    rows = []
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0] in ("State", "Recv-Q", "Netid"):
            continue
        if fields[0] in _SS_STATES:
            if fields[0] != "ESTAB":
                continue
            fields = fields[1:]
        if len(fields) < 4 or not (fields[0].isdigit() and fields[1].isdigit()):
            raise NetParseError(f"not a line of `ss -tn` output: {line.strip()[:200]!r}")
        rows.append(fields)
    return rows


def count_established(text: str) -> int:
    """How many TCP connections `ss -Htn state established` (or `ss -tn`) lists as established."""
    return len(_ss_established(text))


def count_established_proc(text: str, ports: set[int] | None = None) -> int:
    """Established TCP connections in a /proc/PID/net/tcp or tcp6 table (state 01), to a remote
    port of ``ports`` when given: `ss` inside a container holding thousands of connections under
    full load can take minutes to start."""
    count = 0
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or not fields[0].endswith(":"):
            raise NetParseError(f"not a line of /proc/net/tcp: {line.strip()[:200]!r}")
        remote_port = int(fields[2].rsplit(":", 1)[-1], 16) if ":" in fields[2] else -1
        count += fields[3] == "01" and (ports is None or remote_port in ports)
    return count


def established_by_peer(text: str) -> dict[str, int]:
    """Established connections per peer address:port, e.g. {'198.18.4.12:5210': 126} (an iperf3
    client holds its -P data connections plus one control connection to the same port)."""
    counts: dict[str, int] = {}
    for fields in _ss_established(text):
        counts[fields[3]] = counts.get(fields[3], 0) + 1
    return dict(sorted(counts.items()))


def sum_throughput(results: list[dict]) -> dict:
    """Throughput of several tool runs that ran at the same time (one per server or port), summed
    per direction: {directions: {direction: {bytes, bytes_per_second, bits_per_second, runs}},
    bytes, bytes_per_second, bits_per_second, runs}. Rates add; they are valid as a total only
    for runs whose measured windows coincide, which the caller arranges."""
    if not results:
        raise ValueError("no runs to sum")
    directions: dict[str, dict] = {}
    for result in results:
        for direction, d in result["directions"].items():
            cell = directions.setdefault(direction, {"bytes": 0, "bytes_per_second": 0.0,
                                                     "bits_per_second": 0.0, "runs": 0})
            cell["bytes"] += d["bytes"]
            cell["bytes_per_second"] += d["bytes_per_second"]
            cell["bits_per_second"] += d["bits_per_second"]
            cell["runs"] += 1
    return {"directions": directions, "runs": len(results), **_sum_directions(directions)}


# ---------------------------------------------------------------------------------------------
# Starting together, TCP counters, combining latency sessions, the sender's kernel profile


def start_at(epoch_s: float) -> str:
    """A POSIX shell line that sleeps until `epoch_s` (wall clock, nanoseconds from `date`), so
    that processes started by several `docker exec` calls begin at the same instant."""
    if not epoch_s > 0:
        raise ValueError(f"the start time must be a positive epoch time, not {epoch_s!r}")
    ns = int(round(epoch_s * 1e9))
    return (f"d=$(({ns} - $(date +%s%N))); if [ $d -gt 0 ]; then "
            "sleep $((d / 1000000000)).$(printf %09d $((d % 1000000000))); fi")


def parse_snmp_tcp(text: str) -> dict[str, int]:
    """The `Tcp:` counters of /proc/net/snmp (a header line of names, then one of values), e.g.
    {'InSegs': 123, 'OutSegs': 456, 'RetransSegs': 0, ...}."""
    rows = [line.split() for line in text.splitlines() if line.startswith("Tcp:")]
    if len(rows) != 2 or len(rows[0]) != len(rows[1]):
        raise NetParseError("no Tcp: header and value lines in /proc/net/snmp")
    try:
        return {name: int(value) for name, value in zip(rows[0][1:], rows[1][1:])}
    except ValueError:
        raise NetParseError(f"a Tcp: counter in /proc/net/snmp is not a number: "
                            f"{' '.join(rows[1])[:200]!r}") from None


def segments_per_ack(before: dict[str, int], after: dict[str, int]) -> float | None:
    """Data segments sent per segment received between two readings of a sender's Tcp counters
    (001's ACK ratio: on a bulk sender nearly every segment received is an ACK); None when
    nothing was received."""
    sent = after["OutSegs"] - before["OutSegs"]
    got = after["InSegs"] - before["InSegs"]
    return sent / got if got > 0 else None


def combine_latency(results: list[dict]) -> dict:
    """Several sockperf sessions that ran at the same time, as one figure: the mean latency over
    every observation (each session's average weighted by its observations), the median of the
    sessions' medians, the largest of their 99th percentiles, messages per second summed."""
    if not results:
        raise ValueError("no latency sessions to combine")
    observations = sum(r["observations"] for r in results)
    if observations <= 0:
        raise NetParseError("no sockperf session received a reply")
    medians = sorted(r["percentiles"]["50"] for r in results)
    mid = len(medians) // 2
    median = medians[mid] if len(medians) % 2 else (medians[mid - 1] + medians[mid]) / 2
    return {"sessions": len(results),
            "latency_avg_us": sum(r["avg"] * r["observations"] for r in results) / observations,
            "p50_us": median,
            "p99_us": max(r["percentiles"]["99"] for r in results),
            "messages": sum(r["received_messages"] for r in results),
            "messages_per_s": sum(r["received_messages"] / r["valid_seconds"]
                                  for r in results if r["valid_seconds"])}


# 001's profile of the transmit path (Solaris functions) and the Linux functions that do the
# same work, whatever the driver: a sample counts for a category when any frame of its kernel
# stack is one of these (inclusive, as 001's er_print percentages are).
PROFILE_CATEGORIES = {
    "write": ("ksys_write", "__sys_sendto", "__sys_sendmsg"),  # 001: write()
    "tcp_output": ("tcp_write_xmit",),  # 001: tcp_wput_data()
    "driver_tx": ("dev_hard_start_xmit",),  # 001: myri10ge_onetrack() (the driver's send)
    "ack": ("tcp_ack",),  # 001: tcp_rput_data(), on a sender nearly all ACKs
}
IDLE_COMMANDS = ("swapper",)
SOFTIRQ_COMMAND = "ksoftirqd"
_PERF_HEAD = re.compile(r"^(?P<comm>\S.*?)\s+(?P<pid>\d+)(?:/\d+)?\s+\[(?P<cpu>\d+)\]")
_PERF_FRAME = re.compile(r"^\s+(?:[0-9a-f]+\s+)?(?P<sym>[^\s(]+)")


def parse_perf_script(text: str, commands: tuple[str, ...] = ()) -> dict:
    """`perf script -F comm,pid,cpu,ip,sym` of a call-graph recording (`perf record -g`) into
    inclusive shares (% of all samples) per PROFILE_CATEGORIES category (`<cat>_pct`, 001's
    view: the whole of the CPUs sampled), the same among the sender's own samples only (the
    tool's processes and the kernel's softirq threads: `<cat>_sender_pct`, over
    `sender_samples`; other work on a shared host left out), plus: samples, idle_pct (the idle
    task), tool_pct (samples of `commands`, e.g. the benchmark's own processes), other_pct (busy
    samples of anything else), and top: the 15 commands with the most samples."""
    samples, idle, tool, sender = 0, 0, 0, 0
    hits = dict.fromkeys(PROFILE_CATEGORIES, 0)
    own = dict.fromkeys(PROFILE_CATEGORIES, 0)
    by_comm: dict[str, int] = {}
    wanted = {f: c for c, fs in PROFILE_CATEGORIES.items() for f in fs}

    def close(comm: str, frames: set[str]) -> None:
        nonlocal samples, idle, tool, sender
        samples += 1
        by_comm[comm] = by_comm.get(comm, 0) + 1
        mine = any(comm == c or comm.startswith(c) for c in commands)
        if comm in IDLE_COMMANDS:
            idle += 1
        elif mine:
            tool += 1
        mine = mine or comm.startswith(SOFTIRQ_COMMAND)
        sender += mine
        for cat in {wanted[f] for f in frames if f in wanted}:
            hits[cat] += 1
            own[cat] += mine

    comm: str | None = None
    frames: set[str] = set()
    for line in text.splitlines():
        if not line.strip():
            if comm is not None:
                close(comm, frames)
            comm, frames = None, set()
            continue
        if comm is None:
            m = _PERF_HEAD.match(line)
            if m is None:
                raise NetParseError(f"not a sample line of `perf script`: {line.strip()[:200]!r}")
            comm = m["comm"].strip()
            continue
        f = _PERF_FRAME.match(line)
        if f:
            frames.add(f["sym"].split("+", 1)[0])
    if comm is not None:
        close(comm, frames)
    if samples == 0:
        raise NetParseError("perf recorded no samples (is cpu-clock sampling allowed here?)")
    pct: dict[str, float | None] = {f"{cat}_pct": 100.0 * n / samples for cat, n in hits.items()}
    pct.update({f"{cat}_sender_pct": 100.0 * n / sender if sender else None
                for cat, n in own.items()})
    top = sorted(by_comm.items(), key=lambda kv: -kv[1])[:15]
    return {"samples": samples, "sender_samples": sender, **pct,
            "idle_pct": 100.0 * idle / samples,
            "tool_pct": 100.0 * tool / samples,
            "other_pct": 100.0 * (samples - idle - tool) / samples,
            "top": [{"command": c, "pct": 100.0 * n / samples} for c, n in top]}
