"""Issue 43 on the real stack: quick's 1 MB trace profiled (--profile categories), offloads off
against on, three repetitions. The categories move as the kernel predicts: with checksum offload
off the stack computes checksums in software, and with segmentation and receive aggregation off
it handles every segment of 1.5 KB on its own, so checksum and per-packet protocol work (TCP/IP)
take more of the tiers' CPU per KB, each asserted as a direction with its 95 % interval over the
repetitions; every point keeps its uncategorized samples under UNCATEGORIZED_BOUND % of its busy
ones. Marked full (about 3 min; make test-cluster runs it): the profile's parts are tested
without the stack in test_profile_categories.py, the intervals in test_what_moved.py."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from stack_env import EXPERIMENTS, cli_env, tierbench

from analysis import kernelview

pytestmark = [pytest.mark.stack, pytest.mark.full]

UNCATEGORIZED_BOUND = 1.0  # % of a point's busy samples (docs/measurement.md)


def test_offloads_off_move_the_categories_the_kernel_predicts(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    with cli_env(tmp_path_factory.mktemp("profile")) as env:
        done = tierbench(env, "run", str(EXPERIMENTS / "quick-1m-profile.yml"), "--profile",
                         "categories", timeout=1200)
        assert done.returncode == 0, done.stderr
        run = sorted((Path(env["TIERBENCH_RESULTS"]) / "quick-1m-profile").iterdir())[-1]
    points = pd.read_csv(run / "summary.csv")
    if "error" in points:
        assert points["error"].isna().all(), points["error"].tolist()
    assert (points["cat_samples"] > 1000).all()
    assert (points["cat_uncategorized_pct"] < UNCATEGORIZED_BOUND).all(), \
        points["cat_uncategorized_pct"].tolist()
    on = points[points["mode"] == "offloads-on+tcp-cubic"]
    off = points[points["mode"] == "offloads-off+tcp-cubic"]
    assert len(on) == len(off) == 3
    unit, moves = kernelview.moved(on, off)
    assert unit == "the tiers' CPU µs per KB"
    got = {m.category: m for m in moves}
    assert got["checksum"].direction == 1, got["checksum"]
    assert got["tcp ip"].direction == 1, got["tcp ip"]
    assert all((run / "points" / p / "flamegraph.html").is_file() for p in points["point"])
