"""The warm pass (`load.warm_pass`; a study row's recommended scale turns it on): before a
point, when the caches do not already hold its trace's working set (the deployment's first point
of a trace, or one after a point of another trace), one unmeasured pass over that set, each
distinct file once, sent from the load generator through the targets the measured requests take
(round the proxies as the clients are spread; through every proxy when each keeps its own
cache), so that a shortened run does not measure the first touches of a cold, capped cache
(issue 44). Recorded in the point's point.json as ``warmed``: files, bytes, seconds, errors.

A working set larger than its cache leaves the popular part cached: the files are sent in the
order the trace first asks for them (the popular ones first, by and large) to caching proxies,
whose guard stops storing once full and so keeps what came first, and in the reverse order to a
page cache, which keeps what came last. The lists it writes are counted before anything is
written (:func:`needs`), and a working set larger than the cache is said (:func:`fit_note`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tierbench.config.files import results_root
from tierbench.kinds.contract import Experiment, PointContext
from tierbench.kinds.web.load import LoadSpec, container_path
from tierbench.kinds.web.settings import WebSettings, stack_settings, trace_dicts
from tierbench.kinds.web.sizes import CACHE_GUARD_LIMIT_PCT, PROXY_CACHE_SIZE_DEFAULT
from tierbench.kinds.web.stack import GENERATOR
from tierbench import space
from workloads import filesets
from workloads import traces as tracelib

URL_BYTES = 64  # the most a target's URL adds to a path in a list (http://proxy4:80 is 17)
RATE_FLOOR_BPS = 2e6  # the slowest a pass may go before it is given up (an emulated disk: 35 MB/s)

# Run in the load generator (its python3): every URL of the list once, on one keep-alive
# connection per target, bodies read and dropped; one JSON line of what it did.
CLIENT = r"""
import http.client, json, sys, time, urllib.parse
conns, files, got, errors, t0 = {}, 0, 0, 0, time.monotonic()
for line in open(sys.argv[1]):
    url = line.strip()
    if not url:
        continue
    u, ok = urllib.parse.urlsplit(url), False
    for attempt in (0, 1):
        c = conns.get(u.netloc) or http.client.HTTPConnection(u.hostname, u.port or 80, timeout=60)
        conns[u.netloc] = c
        try:
            c.request("GET", u.path + ("?" + u.query if u.query else ""))
            r = c.getresponse()
            while True:
                chunk = r.read(1 << 16)
                if not chunk:
                    break
                got += len(chunk)
            ok = 200 <= r.status < 400
            break
        except (OSError, http.client.HTTPException):
            c.close()
            conns.pop(u.netloc, None)
    files += 1
    errors += not ok
print(json.dumps({"requests": files, "bytes": got, "errors": errors,
                  "seconds": round(time.monotonic() - t0, 2)}))
"""


PLAN_LINE = ("warm pass (load.warm_pass): before every point whose trace's working set the "
             "caches do not hold, one unmeasured pass over it, each distinct file once through "
             "the load's path (not in the estimate)")


def wants_misses(s: WebSettings) -> str | None:
    """What of the experiment asks its points to miss the caches (a warm pass would defeat
    it): hit-ratio traces, a cold page cache; None when nothing does."""
    if s.stack.page_cache == "cold":
        return "stack.page_cache: cold"
    hit = [t.name for t in s.traces if getattr(t, "kind", "") == "hit-ratio"]
    return f"hit-ratio trace {hit[0]}" if hit else None


def working_set(trace: Path) -> list[str]:
    """The distinct static files a trace file asks for, in the order it first asks for each
    (its dynamic requests left out: they are computed, not cached)."""
    seen: dict[str, None] = {}
    with trace.open() as fh:
        for line in fh:
            path = line.strip()
            if path and not path.startswith("#") and not path.startswith(tracelib.DYNAMIC_PREFIX):
                seen.setdefault(path)
    return list(seen)


def requests(paths: list[str], targets: list[str], each_target: bool) -> list[str]:
    """The pass's URLs: each path once, path i through target i mod n (the clients are spread
    round the targets), or each path through every target when each keeps its own cache."""
    bases = [t.rstrip("/") for t in targets]
    if each_target:
        return [b + p for b in bases for p in paths]
    return [bases[i % len(bases)] + p for i, p in enumerate(paths)]


def fit_note(nbytes: int, cache_bytes: int | None, what: str) -> str | None:
    """A sentence when a working set of ``nbytes`` is larger than the cache it warms (None when
    it fits or the cache has no stated size)."""
    if cache_bytes is None or nbytes <= cache_bytes:
        return None
    return (f"the working set ({space.human(nbytes)}) is larger than {what} "
            f"({space.human(cache_bytes)}): the pass leaves the files the trace asks for first "
            "cached, the popular ones by and large")


def pass_order(paths: list[str], proxy_cache: bool) -> list[str]:
    """The working set in the order the pass sends it: as first asked for to caching proxies
    (their guard keeps what is stored first), reversed to a page cache (it keeps what is read
    last), so that the part left cached is the popular one either way."""
    return list(paths) if proxy_cache else list(reversed(paths))


def needs(exp: Experiment[WebSettings]) -> list[space.Need]:
    """The pass's lists in the results folder (each trace's files through every proxy, at
    most), counted with the run's other needs before anything is written."""
    s = exp.settings
    if not s.load.warm_pass:
        return []
    targets = max(int(stack_settings(s).get("proxies") or 1), 1)
    nbytes = 0
    for spec in trace_dicts(s):
        nbytes += targets * sum(len(p) + 1 + URL_BYTES for p, _ in filesets_files(spec))
    return [space.on_disk(f"the warm passes' request lists of {exp.source}", nbytes,
                          results_root(), "the results folder",
                          "drop load.warm_pass, use fewer proxies or free space there")]


def filesets_files(spec: dict[str, Any]) -> list[tuple[str, int]]:
    """Every file of a trace spec's file sets."""
    return [f for fs in tracelib.filesets_of(spec) for f in filesets.files(fs)]


def cache_of(record: dict[str, Any], proxy_cache: bool) -> tuple[int | None, str]:
    """The cache the pass fills and its size: the web tier's memory cap, else each proxy's
    cache (what its guard lets it store), else none stated."""
    if record.get("web_memory"):
        return space.parse_size(str(record["web_memory"]), "stack.web_memory"), \
            "the web tier's memory cap"
    if proxy_cache:
        size = space.setting_size("PROXY_CACHE_SIZE", PROXY_CACHE_SIZE_DEFAULT)
        return size * CACHE_GUARD_LIMIT_PCT // 100, "what each proxy's cache stores"
    return None, ""


def run(ctx: PointContext[WebSettings, Any, Any], spec: LoadSpec, trace: Path,
        empty_caches: Callable[[Any], None]) -> None:
    """The pass before a point whose trace is not the one the caches were last warmed with
    (nothing when it is): the proxies' caches emptied first when they cache (``empty_caches``),
    the list written and sent; ``warmed`` in point.json, and a line when requests failed or the
    set does not fit. Only a pass that answered every request counts as warming: after one
    that did not, the next point's pass runs again."""
    info, point = ctx.deployment.info, ctx.point
    name = point["trace"]["name"]
    if info.warmed == name:
        return
    info.warmed = None  # the pass empties the caches: until it ends whole they hold no set
    stack = info.stack
    paths = working_set(trace)
    urls = requests(pass_order(paths, stack.proxy_cache), list(spec.targets) or [spec.target],
                    stack.proxy_cache)
    sizes = dict(filesets_files(point["trace"]))
    nbytes = sum(sizes.get(p, 0) for p in paths)
    if stack.proxy_cache:
        empty_caches(ctx)
    listed = ctx.dir / "warm.txt"
    listed.write_text("".join(u + "\n" for u in urls))
    where, loadgen = ctx.deployment.placer, ctx.deployment.containers[GENERATOR]
    where.push(loadgen, [listed])
    ctx.log(f"tierbench: {point.id}: warm pass over trace {name}'s working set: {len(paths):,} "
            f"files ({space.human(nbytes)}), {len(urls):,} requests, not counted")
    done = where.exec(loadgen, ["python3", "-c", CLIENT, container_path(listed)],
                      timeout=120 + len(urls) / len(paths or [1]) * nbytes / RATE_FLOOR_BPS)
    listed.unlink()
    try:
        figures = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        figures = {"error": (done.stderr.strip().splitlines() or ["no answer"])[-1]}
    cache, what = cache_of(stack.record, stack.proxy_cache)
    note = fit_note(nbytes, cache, what)
    ctx.record["warmed"] = {"trace": name, "files": len(paths), "file_bytes": nbytes,
                            **figures, **({"note": note} if note else {})}
    if not figures.get("errors") and "error" not in figures:
        info.warmed = name  # a pass with failed requests runs again before the next point
    if figures.get("errors") or "error" in figures or note:
        ctx.log(f"tierbench: {point.id}: warm pass: "
                + "; ".join(x for x in (
                    f"{figures.get('errors')} requests failed" if figures.get("errors") else "",
                    str(figures.get("error") or ""), note or "") if x))
