"""What moved between two modes, by kernel category (issue 43, for the advisor and the docs'
figures): per category the difference of CPU µs per KB with a 95 % Welch interval, on
simulated points whose truth is known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import kernelview

# the truth: host CPU per KB and the categories' shares (%) of it, per mode
TRUTH = {"offloads-on": (0.20, {"data_copy": 40.0, "checksum": 0.1, "tcp_ip": 15.0,
                                "user": 44.9}),
         "offloads-off": (0.25, {"data_copy": 32.0, "checksum": 4.0, "tcp_ip": 24.0,
                                 "user": 40.0})}


def points(mode: str, n: int, rng: np.random.Generator, sd: float = 0.01) -> pd.DataFrame:
    """n repetitions of a mode: each category's µs/KB is its truth plus normal noise (sd in
    µs/KB), written back as summary.csv's columns (share of busy, host CPU per KB)."""
    per_kb, shares = TRUTH[mode]
    rows = []
    for _ in range(n):
        cat = {c: max(per_kb * s / 100 + rng.normal(0, sd), 1e-6) for c, s in shares.items()}
        total = sum(cat.values())
        row = {"mode": mode, "host_cpu_us_per_kb": total, "cat_idle_pct": 30.0,
               "cat_uncategorized_pct": 0.0}
        row.update({f"cat_{c}_pct": 100 * v / total for c, v in cat.items()})
        rows.append(row)
    return pd.DataFrame(rows)


def true_diff(category: str) -> float:
    (a, sa), (b, sb) = TRUTH["offloads-on"], TRUTH["offloads-off"]
    key = category.replace(" ", "_")
    return b * sb.get(key, 0.0) / 100 - a * sa.get(key, 0.0) / 100


def test_the_moves_are_the_known_differences_with_their_directions() -> None:
    rng = np.random.default_rng(43)
    u, moves = kernelview.moved(points("offloads-on", 5, rng, 0.002),
                                points("offloads-off", 5, rng, 0.002))
    assert u == "host CPU µs per KB"
    got = {m.category: m for m in moves}
    assert got["checksum"].direction == 1 and got["tcp ip"].direction == 1
    assert got["data copy"].direction == 0  # 0.080 -> 0.080 µs/KB
    assert got["checksum"].diff == pytest.approx(true_diff("checksum"), abs=0.004)
    assert got["uncategorized"].diff == 0
    assert moves[0].category in ("tcp ip", "checksum")  # largest move first


def test_the_intervals_cover_the_truth_as_often_as_they_say() -> None:
    """250 simulated comparisons of 4 against 4 repetitions: each category's 95 % interval
    holds the true difference in 91-99 % of them."""
    rng = np.random.default_rng(7)
    hits = {c: 0 for c in ("data copy", "checksum", "tcp ip")}
    for _ in range(250):
        _, moves = kernelview.moved(points("offloads-on", 4, rng), points("offloads-off", 4,
                                                                          rng))
        for m in moves:
            if m.category in hits:
                assert m.diff is not None and m.half is not None
                hits[m.category] += abs(m.diff - true_diff(m.category)) <= m.half
    for c, n in hits.items():
        assert 0.91 <= n / 250 <= 0.99, (c, n)


def test_the_line_for_a_recommendation_names_what_moved_and_what_did_not() -> None:
    rng = np.random.default_rng(1)
    line = kernelview.what_moved(points("offloads-on", 5, rng, 0.002),
                                 points("offloads-off", 5, rng, 0.002))
    assert line.startswith("tcp ip +0.0") or line.startswith("checksum +0.0"), line
    assert "checksum +" in line and "µs/KB [" in line
    assert line.endswith("unchanged: data copy"), line
    assert kernelview.what_moved(pd.DataFrame([{"mode": "a", "tps": 1.0}]),
                                 pd.DataFrame([{"mode": "b", "tps": 1.0}])) == ""


def test_the_tiers_own_cpu_per_kb_is_preferred_to_the_hosts() -> None:
    """With the tiers' samples and the bytes moved, a category's CPU per KB is the tiers' (the
    share of their samples times the CPU seconds those stand for, per KB), not the host's,
    which counts a shared host's other processes."""
    def point(mode: str, checksum_pct: float) -> dict:
        return {"mode": mode, "bytes_moved": 1024 * 1e6, "cat_tiers_cpu_s": 2.0,
                "cat_tiers_checksum_pct": checksum_pct, "cat_tiers_user_pct": 100 - checksum_pct,
                "cat_checksum_pct": 50.0, "cat_user_pct": 50.0, "host_cpu_us_per_kb": 9.0}
    base = pd.DataFrame([point("on", 1.0), point("on", 1.0)])
    other = pd.DataFrame([point("off", 10.0), point("off", 10.0)])
    u, moves = kernelview.moved(base, other)
    got = {m.category: m for m in moves}
    assert u == "the tiers' CPU µs per KB"
    assert got["checksum"].baseline == pytest.approx(0.02)  # 1 % of 2 s over 1e6 KB
    assert got["checksum"].diff == pytest.approx(0.18)


def test_the_why_table_says_what_moved_from_the_baseline_in_each_condition() -> None:
    rng = np.random.default_rng(5)
    on, off = points("offloads-on", 4, rng, 0.002), points("offloads-off", 4, rng, 0.002)
    entries = [("offloads-on", "offloads-on", on), ("offloads-off", "offloads-off", off)]
    got = kernelview.why_table(pd.concat([on, off]), entries,
                               {"offloads-on": "#000", "offloads-off": "#111"}, "offloads-on")
    assert got is not None
    ((who, line),) = got["moved"]
    assert who == "offloads-off against offloads-on"
    assert "checksum +" in line and "unchanged: data copy" in line
    plain = kernelview.why_table(pd.concat([on, off]), entries, {"offloads-on": "#000",
                                 "offloads-off": "#111"})
    assert plain is not None and plain["moved"] == []  # no baseline


def test_perf_and_the_tiers_columns_are_not_categories() -> None:
    cols = pd.DataFrame([{"cat_checksum_pct": 1.0, "cat_idle_pct": 5.0, "cat_perf_cpu_pct": 2.0,
                          "cat_tiers_checksum_pct": 3.0, "cat_uncategorized_pct": 0.1}])
    assert kernelview.categories(cols) == ["checksum", "uncategorized"]
