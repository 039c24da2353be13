"""The warm pass on the real stack through `tierbench run` (tests/data/experiments/
warm-pass-short.yml: a caching proxy, two points of one trace on one deployment): the first
point records its pass (every distinct file of the trace once through the proxy, none failed,
the bytes of the files received), the second none; both measured, with the cache-miss share and
the cold-cache flag in their rows.

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


def test_the_first_point_of_a_trace_warms_its_working_set_uncounted(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    with cli_env(tmp_path_factory.mktemp("warm")) as env:
        done = tierbench(env, "run", str(EXPERIMENT), timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        run_dir = next((Path(env["TIERBENCH_RESULTS"]) / "warm-pass-short").iterdir())
        rows = summary_rows(run_dir)
    files = warm.working_set(run_dir / "traces" / "zipf-0.9.txt")
    first, second = (json.loads((run_dir / "points" / p / "point.json").read_text())
                     for p in ("p001", "p002"))
    warmed = first["warmed"]
    assert warmed["files"] == warmed["requests"] == len(files) > 100, warmed
    assert warmed["errors"] == 0 and warmed["bytes"] >= warmed["file_bytes"] > 0, warmed
    assert "warmed" not in second
    for row in rows:
        assert not row["error"] and float(row["tps"]) > 0, row
        # the cache warmed (and kept between points): the window's requests hit it
        assert float(row["proxy_hit_ratio"]) > 0.9 and row["cold_cache"] == "false", row
        assert float(row["cache_miss_share"]) < 0.1, row
