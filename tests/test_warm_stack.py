"""The warm pass on the real stack through `tierbench run` (tests/data/experiments/
warm-pass-short.yml: two caching proxies, four points of two traces on one deployment): each
point after one of the other trace records its pass (every distinct file of the trace once
through each proxy, none failed, the bytes of the files received), a point after one of its own
trace none; all measured, the window's requests hitting what the pass stored on both proxies.

Needs root, Docker with Compose v2 and the images (`make test` provides them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from stack_env import cli_env, summary_rows, tierbench

from tierbench.kinds.web import warm

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = ROOT / "tests" / "data" / "experiments" / "warm-pass-short.yml"


def test_a_point_after_another_trace_warms_and_every_proxy_finds_what_was_stored(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    with cli_env(tmp_path_factory.mktemp("warm")) as env:
        # caches of 8 MiB, whose guard stops storing at 5.6 MiB: half the working set
        done = tierbench({**env, "PROXY_CACHE_SIZE": "8m"}, "run", str(EXPERIMENT), timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        run_dir = next((Path(env["TIERBENCH_RESULTS"]) / "warm-pass-short").iterdir())
        rows = summary_rows(run_dir)
    records = [json.loads((run_dir / "points" / p / "point.json").read_text())
               for p in ("p001", "p002", "p003", "p004")]  # in the order they ran
    order = [r["trace"] for r in records]
    assert order == ["zipf-0.8", "zipf-0.9", "zipf-0.9", "zipf-0.8"], order
    for before, record in zip([None, *order], records):
        if record["trace"] == before:  # the caches hold its working set already
            assert "warmed" not in record, record["warmed"]
            continue
        warmed = record["warmed"]
        files = warm.working_set(run_dir / "traces" / f"{record['trace']}.txt")
        assert warmed["files"] == len(files) > 1000, warmed
        assert warmed["requests"] == 2 * len(files), warmed  # through each of the 2 proxies
        assert warmed["errors"] == 0 and warmed["bytes"] >= 2 * warmed["file_bytes"] > 0, warmed
    for row in rows:
        assert not row["error"] and float(row["tps"]) > 0, row
        # What the pass stored, both proxies found. The full caches keep the ~500 files asked
        # for first, about 0.7 of the requests; had one proxy keyed the pass's entries apart
        # from the load's (wrk sends both proxies one Host, the pass each its own), it would
        # hit next to nothing and the two about 0.35.
        assert float(row["proxy_hit_ratio"]) > 0.55 and row["cold_cache"] == "false", row
