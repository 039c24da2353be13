"""Tests for the analysis package: statistics, loading, warm-up, tables, warnings, compare, and
the package's own structure (no import cycles, no private names across modules, no runner)."""

from __future__ import annotations

import ast
import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from analysis import compare, load, report, stats, tables
from tierbench.stats import precision, quantiles

import synthetic_runs

ROOT = Path(__file__).resolve().parent.parent
# A real run of an earlier `quick` (Locust, 12 points; once the shipped example): the analysis
# is checked against figures computed by hand from it.
EXAMPLE = ROOT / "tests" / "data" / "quick-locust-run"
OLD = Path(__file__).parent / "data" / "run-example"


def _synthetic(rows: list[dict], *, name: str = "dc-test", traces: list | None = None) -> dict:
    man = synthetic_runs.manifest(name, traces)
    man.pop("host")
    return man


_write_run = synthetic_runs.write_run


# --------------------------------------------------------------------------- statistics


@pytest.mark.parametrize(
    ("p", "df", "want"),
    [(0.975, 1, 12.7062), (0.975, 2, 4.3027), (0.975, 3, 3.1824), (0.975, 4, 2.7764),
     (0.975, 10, 2.2281), (0.975, 30, 2.0423), (0.95, 1, 6.3138), (0.995, 5, 4.0321)],
)
def test_t_quantile_matches_tables(p: float, df: float, want: float) -> None:
    assert quantiles.t_quantile(p, df) == pytest.approx(want, abs=2e-4)


def test_t_quantile_fractional_df_symmetry_limits_and_errors() -> None:
    # fractional degrees of freedom (Welch): between the neighbouring integer rows
    assert 4.3027 > quantiles.t_quantile(0.975, 2.5) > 3.1824
    # 3.57465 is what the package's former continued-fraction t CDF gave (bisection)
    assert quantiles.t_quantile(0.975, 2.5) == pytest.approx(3.57465, abs=1e-4)
    assert quantiles.t_quantile(0.975, 7.3) == pytest.approx(2.34507, abs=1e-4)
    assert quantiles.t_quantile(0.025, 4) == pytest.approx(-2.776, abs=5e-4)
    assert quantiles.t_quantile(0.975, 1e7) == pytest.approx(1.95996, abs=1e-4)
    assert quantiles.t_quantile(0.5, 3) == 0.0
    for bad in ((1.0, 3), (0.0, 3), (0.9, 0), (0.9, -1)):
        with pytest.raises(ValueError, match="0 < p < 1 and df > 0"):
            quantiles.t_quantile(*bad)


def test_mean_ci_by_hand() -> None:
    e = stats.mean_ci([10, 12, 14])  # mean 12, sd 2, half = 4.303 * 2 / sqrt(3)
    assert (e.n, e.mean, e.sd) == (3, 12.0, pytest.approx(2.0))
    assert e.half == pytest.approx(4.303 * 2 / math.sqrt(3), rel=1e-3)  # 4.969
    assert (e.low, e.high) == (pytest.approx(12 - 4.9687, abs=1e-3), pytest.approx(16.9687,
                                                                                   abs=1e-3))
    assert e.cv == pytest.approx(2 / 12)
    two = stats.mean_ci([4125.3, 4188.9])  # n = 2: half = 12.706 x half-range
    assert two.half == pytest.approx(12.706 * 31.8, rel=1e-4)
    one = stats.mean_ci([5.0, None, float("nan")])
    assert one.n == 1 and one.mean == 5.0 and one.half is None and one.low is None
    assert stats.mean_ci([]).mean is None


def test_tps_change_by_hand() -> None:
    # a: mean 100, var 200; b: mean 50, var 50. Ratio 2, relative variances both 0.01,
    # se = 2 sqrt(0.02) = 0.28284, Welch df = (0.02)^2 / (2 x 0.01^2) = 2, t = 4.303.
    r = stats.tps_change_pct([90, 110], [45, 55])
    assert r.value == pytest.approx(100.0)
    assert r.df == pytest.approx(2.0)
    half = 100 * 4.303 * 2 * math.sqrt(0.02)  # 121.7 %
    assert r.low == pytest.approx(100 - half, rel=1e-3)
    assert r.high == pytest.approx(100 + half, rel=1e-3)


def test_relative_cpu_benefit_by_hand() -> None:
    # (b - a) / b with a = 0.7, b = 1.0 -> 0.3; ua = 0.02 / (2 x 0.49), ub = 0.02 / 2
    r = stats.relative_cpu_benefit([0.6, 0.8], [0.9, 1.1])
    assert r.value == pytest.approx(0.3)
    ua, ub = 0.02 / (2 * 0.49), 0.02 / 2
    df = (ua + ub) ** 2 / (ua**2 + ub**2)
    assert r.df == pytest.approx(df)
    half = quantiles.t_quantile(0.975, df) * 0.7 * math.sqrt(ua + ub)
    assert (r.low, r.high) == (pytest.approx(0.3 - half), pytest.approx(0.3 + half))
    assert stats.relative_cpu_benefit([0.5], [1.0]).value == pytest.approx(0.5)
    assert stats.relative_cpu_benefit([0.5], [1.0]).low is None  # one repetition: no CI
    exact = stats.relative_cpu_benefit([0.5, 0.5], [1.0, 1.0])
    assert exact.low == exact.high == pytest.approx(0.5)


def test_relative_cpu_benefit_sign() -> None:
    """One definition everywhere: (b - a) / b, positive when the mode (a) uses less CPU."""
    assert stats.relative_cpu_benefit([2.0, 2.0], [4.0, 4.0]).value == pytest.approx(0.5)
    assert stats.relative_cpu_benefit([6.0], [4.0]).value == pytest.approx(-0.5)


def test_per_request_per_kb_and_cycles() -> None:
    assert stats.us_per_request(2.0, 1000) == pytest.approx(2000.0)
    assert stats.us_per_kb(1.0, 1024 * 1000) == pytest.approx(1000.0)
    assert math.isnan(stats.us_per_kb(1.0, 0))
    model = stats.clock("Intel(R) Xeon(R) Processor @ 2.50GHz")
    assert model.hz == 2.5e9 and "CPU model" in model.source
    measured = stats.clock("Intel(R) Xeon(R) Processor @ 2.50GHz", cpu_mhz=2994.4)
    assert measured.hz == pytest.approx(2.9944e9) and "cpu_mhz" in measured.source
    assert stats.clock("AMD EPYC", "3000").hz == 3e9
    assert stats.clock("AMD EPYC") is None and stats.clock(None, "n/a") is None
    assert stats.estimated_cycles_per_kb(1.0, 1024 * 2500, 2.5e9) == pytest.approx(1e6)


# --------------------------------------------------------------------------- loading


def test_example_run_loads_as_a_tidy_table() -> None:
    run = load.load_run(EXAMPLE)
    pts = run.points
    assert len(pts) == 12 and run.name == "quick" and run.seed == 2026 and not run.notes
    assert set(pts["mode"]) == {"offloads-on", "offloads-off"}
    assert pts.groupby(["trace", "mode"]).size().tolist() == [2] * 6
    assert list(pts["order"]) == list(range(1, 13))
    zipf = pts[pts["trace"] == "zipf-0.9"]
    assert (zipf["alpha"] == 0.9).all() and (zipf["trace_kind"] == "zipf").all()
    assert (pts[pts["trace"] == "single-4k"]["size_bytes"] == 4096).all()
    p1 = pts.set_index("point").loc["p001"]
    # per-tier and host normalisation, by hand from the summary row
    kb = p1["bytes_moved"] / 1024
    assert p1["cpu_us_per_req_web"] == pytest.approx(p1["cpu_s_web"] * 1e6 / p1["requests"])
    assert p1["cpu_us_per_kb_proxy"] == pytest.approx(p1["cpu_s_proxy"] * 1e6 / kb)
    assert p1["host_cpu_us_per_req"] == pytest.approx(
        p1["host_cpu_us_per_kb"] * kb / p1["requests"])
    assert p1["server_cpu_util"] == pytest.approx(p1["cpu_s_servers"] / p1["window_s"])
    assert p1["server_cycles_per_kb"] == pytest.approx(p1["cpu_s_servers"] * 2.5e9 / kb)
    assert p1["host_cycles_per_kb"] == pytest.approx(p1["host_cpu_s"] * 2.5e9 / kb)
    assert p1["cycles_source"].startswith("estimate: CPU time x clock (no hardware counters)")
    assert run.spec_source == "manifest.json" and run.spec["family"] == "dc-single"


def test_samples_mark_the_warm_up_and_match_the_summary() -> None:
    run = load.load_run(EXAMPLE)
    seconds = load.point_samples(run, "p002")
    assert (seconds["phase"] == "warm-up").sum() == 5  # 5 s warm-up at 1 Hz
    measured = seconds[seconds["phase"] == "measured"]
    assert measured["dt"].sum() == pytest.approx(13.997, abs=2e-3)
    assert seconds["window_source"].iloc[0] == "matched to summary.csv"
    row = run.points.set_index("point").loc["p002"]
    # TPS of the window from the per-second table = the summary's TPS
    assert (measured["tps"] * measured["dt"]).sum() / measured["dt"].sum() == pytest.approx(
        row["tps"], rel=1e-5)
    for pid in run.points["point"]:
        again = load.recompute_point(run, pid)
        row = run.points.set_index("point").loc[pid]
        assert again["cpu_s_servers"] == pytest.approx(row["cpu_s_servers"], abs=1e-4)
        assert again["bytes_moved"] == row["bytes_moved"]
        assert again["window_s"] == pytest.approx(row["window_s"], abs=1e-3)
        # the load generator's own 1 s history agrees to within a few %
        assert again["locust_window_tps"] == pytest.approx(row["tps"], rel=0.08)
        if "tps" in again:  # p002 ships requests.csv
            assert again["tps"] == pytest.approx(row["tps"], rel=1e-5)
            assert again["requests"] == row["requests"]


def test_recorded_window_is_preferred(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(EXAMPLE, run_dir)
    pjson = run_dir / "points" / "p002" / "point.json"
    rec = json.loads(pjson.read_text())
    samples = load.read_samples(run_dir / "points" / "p002" / "samples.jsonl")
    rec["window"] = {"start": samples[3]["t"], "end": samples[10]["t"]}
    pjson.write_text(json.dumps(rec))
    run = load.load_run(run_dir)
    seconds = load.point_samples(run, "p002")
    assert (seconds["phase"] == "warm-up").sum() == 3
    assert (seconds["phase"] == "measured").sum() == 7
    assert seconds["window_source"].iloc[0] == "recorded in point.json"


def test_older_layout_loads_with_notes_and_samples_fail_clearly() -> None:
    run = load.load_run(OLD)
    assert len(run.points) == 12 and any("points/ is missing" in n for n in run.notes)
    assert "alpha" in run.points  # traces given as bare names still parse
    with pytest.raises(load.LayoutError, match="samples.jsonl"):
        load.point_samples(run, "p001")


def test_missing_files_and_columns_are_named(tmp_path: Path) -> None:
    with pytest.raises(load.LayoutError, match="summary.csv is missing"):
        load.load_run(tmp_path)
    (tmp_path / "summary.csv").write_text("point,trace,requests\np1,t,10\n")
    with pytest.raises(load.LayoutError, match="mode, tps missing"):
        load.load_run(tmp_path)
    (tmp_path / "summary.csv").write_text("point,trace,mode,tps\np1,t,m,10\n")
    run = load.load_run(tmp_path)
    assert any("manifest.json is missing" in n for n in run.notes)
    assert any("repetition" in n for n in run.notes)
    assert run.spec_source == "generic" and run.spec["factors"] == ["trace"]


def test_cycles_use_the_recorded_clock_or_hardware_counters(tmp_path: Path) -> None:
    rows = [{"trace": "t", "mode": "on", "tps": 10.0, "cpu_s_servers": 1.0,
             "bytes_moved": 1024 * 1000}]
    man = _synthetic(rows)
    man["host"] = {"cpu_model": "Test CPU @ 2.00GHz", "cpu_mhz": 3000.0}
    pts = load.load_run(_write_run(tmp_path / "a", rows, man)).points
    assert pts["server_cycles_per_kb"].iloc[0] == pytest.approx(1.0 * 3e9 / 1000)
    assert "3.00 GHz from host.cpu_mhz" in pts["cycles_source"].iloc[0]
    counted = [{**rows[0], "cycles_servers": 5e6}]
    pts = load.load_run(_write_run(tmp_path / "b", counted, man)).points
    assert pts["server_cycles_per_kb"].iloc[0] == pytest.approx(5e6 / 1000)
    assert pts["cycles_source"].iloc[0].startswith("hardware counters")
    man["host"] = {"cpu_model": "AMD EPYC"}  # no clock known: no cycles at all
    pts = load.load_run(_write_run(tmp_path / "c", rows, man)).points
    assert "server_cycles_per_kb" not in pts and "cycles_source" not in pts


def test_spec_comes_from_the_manifest_else_the_caller_else_generic(tmp_path: Path) -> None:
    rows = [{"trace": "t", "mode": "on", "tps": 10.0}]
    given = synthetic_runs.spec_of("dc-worldcup")
    plain = _write_run(tmp_path / "plain", rows, _synthetic(rows))
    assert load.load_run(plain).spec_source == "generic"
    assert load.load_run(plain, given).spec["family"] == "dc-worldcup"
    man = _synthetic(rows)
    man["report"] = synthetic_runs.spec_of("dc-single")
    run = load.load_run(_write_run(tmp_path / "with", rows, man), given)
    assert run.spec_source == "manifest.json" and run.spec["family"] == "dc-single"
    man["report"] = {"kind": "web", "family": "x", "title": "y", "primary": {"column": "tps"},
                     "columns": [], "costs": [], "benefit": [], "figures": [{"type": "pie"}]}
    bad = _write_run(tmp_path / "bad", rows, man)
    run = load.load_run(bad)
    assert run.spec_source == "generic"
    assert any("figures[0].type must be one of bars, lines, table" in n for n in run.notes)
    page = report.write_report(bad).read_text()
    assert "figures[0].type must be one of" in page


def test_phases_give_one_row_per_point_and_phase(tmp_path: Path) -> None:
    pts = load.load_run(synthetic_runs.family_run(tmp_path, "pfs-streams")).points
    assert set(pts["phase"]) == {"read"}  # the write_* columns are empty: no write rows
    assert len(pts) == 7 * 2 * 2 and "mb_per_s" in pts and "read_mb_per_s" not in pts
    assert pts["client_cycles_per_kb"].notna().all()
    conc = load.load_run(synthetic_runs.family_run(tmp_path, "pfs-concurrent")).points
    assert all(v == ["read", "write"] for v in conc.groupby("point")["phase"].apply(list))
    row = conc[conc["phase"] == "write"].iloc[0]
    assert row["io_servers"] in (5.0, 6.0) and row["integrity"] == "ok"
    failed = [{"point": "p1", "mode": "m", "read_mb_per_s": "", "write_mb_per_s": "",
               "error": "x"}]
    once = load.points_frame(failed, {}, {"phases": ["read", "write"],
                                          "primary": {"column": "mb_per_s"}})
    assert len(once) == 1 and once["phase"].iloc[0] == "read" and once["failed"].all()


# --------------------------------------------------------------------------- tables, warnings


def test_group_stats_and_mode_comparison_on_the_example() -> None:
    run = load.load_run(EXAMPLE)
    g = tables.group_stats(run.points)
    row = g[(g["trace"] == "single-1m") & (g["mode"] == "offloads-on") & (g["metric"] == "tps")]
    a, b = 270.856, 290.942  # p006, p011
    assert row["mean"].iloc[0] == pytest.approx((a + b) / 2)
    assert row["ci_half"].iloc[0] == pytest.approx(12.706 * abs(a - b) / 2, rel=1e-4)
    base = precision.baseline_mode(["offloads-on", "offloads-off"], run.experiment)
    assert base == "offloads-off"
    assert precision.baseline_mode(["a", "b"], {}, {"baseline": "a"}) == "a"
    assert precision.baseline_mode(["offload", "none"], {}) == "none"
    cmp = tables.compare_modes(run.points, base, ["trace"], "tps",
                               run.spec["benefit"]).set_index("trace")
    off = (122.025 + 118.929) / 2  # p002, p007
    assert cmp.loc["single-1m", "change_pct"] == pytest.approx(100 * ((a + b) / 2 / off - 1))
    assert cmp.loc["single-1m", "method"] == "welch"
    assert cmp.loc["single-1m", "change_low"] < cmp.loc["single-1m", "change_pct"]
    # offloads on spends less server CPU per KB on 1 MB files: a positive benefit
    assert cmp.loc["single-1m", "benefit_server_cpu_us_per_kb"] > 0.5


def test_benefit_where_filter_applies_per_phase(tmp_path: Path) -> None:
    run = load.load_run(synthetic_runs.family_run(tmp_path, "pfs-concurrent"))
    cmp = tables.compare_modes(run.points, "offloads-off", ["phase", "io_servers", "clients"],
                               "mb_per_s", run.spec["benefit"])
    reads, writes = cmp[cmp["phase"] == "read"], cmp[cmp["phase"] == "write"]
    # offloads on: 2 us/KB against 4: (4 - 2) / 4 = +50 % on the receiving side only
    assert reads["benefit_client_cpu_us_per_kb"].tolist() == pytest.approx([0.5] * 8)
    assert reads["benefit_server_cpu_us_per_kb"].isna().all()
    assert writes["benefit_server_cpu_us_per_kb"].tolist() == pytest.approx([0.5] * 8)
    assert writes["benefit_client_cpu_us_per_kb"].isna().all()
    assert (reads["change_pct"] > 0).all()


def test_factor_order_follows_the_experiment_not_the_run() -> None:
    pts = pd.DataFrame({"trace": ["single-4k", "single-2k", "single-8k", "single-6k",
                                  "single-10k", "odd"], "users": [64, 1, 256, 16, 4, 2]})
    spec = {"order": {"trace": ["single-2k", "single-4k", "single-6k", "single-8k",
                                "single-10k"]}}
    want = ["single-2k", "single-4k", "single-6k", "single-8k", "single-10k", "odd"]
    assert tables.order_of(pts, "trace", spec) == want
    exp = {"traces": [{"name": "single-10k"}, {"name": "single-2k"}]}
    assert tables.order_of(pts, "trace", {}, exp)[:2] == ["single-10k", "single-2k"]
    assert tables.order_of(pts, "users") == [1, 2, 4, 16, 64, 256]  # numbers ascending
    assert tables.order_of(pts, "users", {"order": {"users": ["16", 1]}})[:2] == [16, 1]
    ordered = tables.sort_points(pts.assign(order=range(6)), ["trace"], spec)
    assert list(ordered["trace"]) == want


def test_warnings_client_bound_errors_failed_and_unstable(tmp_path: Path) -> None:
    rows = [
        {"trace": "t", "mode": "on", "repetition": 1, "tps": 100.0, "client_bound": True,
         "generator_cpu_pct": 97.0},
        {"trace": "t", "mode": "on", "repetition": 2, "tps": 140.0, "errors": 3},
        {"trace": "t", "mode": "off", "repetition": 1, "tps": 100.0},
        {"trace": "t", "mode": "off", "repetition": 2, "tps": 101.0},
        {"trace": "t", "mode": "off", "repetition": 3, "error": "Locust exited with code 1"},
    ]
    run = load.load_run(_write_run(tmp_path / "r", rows, _synthetic(rows)))
    found = {(w.kind, w.where.split(" ")[0])
             for w in tables.warnings_for(run.points, by=["trace", "mode"])}
    assert ("client-bound", "p001") in found
    assert ("errors", "p002") in found
    assert ("failed", "p005") in found
    assert ("unstable", "t") in found  # on: CV of (100, 140) = 23.6 % > 10 %
    assert not any(k == "unstable" and "off" in w for k, w in found)
    page = report.write_report(run.dir).read_text()
    assert "Unstable results" in page and "tps varies 24 %" in page


def test_count_mismatch_is_warned(tmp_path: Path) -> None:
    rows = [{"trace": "t", "mode": "on", "tps": 100.0, "requests": 1000, "count_mismatch": True,
             "records_requests": 950},
            {"trace": "t", "mode": "on", "tps": 100.0, "requests": 1000,
             "count_mismatch": False, "records_requests": 1000},
            {"trace": "t", "mode": "on", "tps": 100.0, "requests": 1000}]
    run = load.load_run(_write_run(tmp_path / "r", rows, _synthetic(rows)))
    found = [w for w in tables.warnings_for(run.points) if w.kind == "count-mismatch"]
    assert [w.where.split(" ")[0] for w in found] == ["p001"]
    assert "1,000 requests" in found[0].message and "950" in found[0].message
    assert "5.0 % apart" in found[0].message
    page = report.write_report(run.dir).read_text()
    top = page[: page.index('id="figure"')]
    assert "Request counts that disagree (1)" in top and "p001" in top
    # the check's own columns are empty where the engine keeps no records: no false alarm
    assert "Points with errors or missing values" not in top


def test_count_mismatch_names_the_engines_whole_run_count(tmp_path: Path) -> None:
    """wrk threads that started apart: TPS from the window's 20,000, wrk counted 27,000."""
    rows = [{"trace": "t", "mode": "on", "tps": 2000.0, "requests": 20000,
             "engine_requests": 27000, "records_requests": 20000, "count_mismatch": True,
             "threads_apart_s": 7.0}]
    run = load.load_run(_write_run(tmp_path / "r", rows, _synthetic(rows)))
    [found] = [w for w in tables.warnings_for(run.points) if w.kind == "count-mismatch"]
    assert "27,000 requests" in found.message and "20,000" in found.message
    top = report.write_report(run.dir).read_text()
    assert "Points with errors or missing values" not in top[: top.index('id="figure"')]


# --------------------------------------------------------------------------- report, compare


def test_example_report_has_family_figure_references_and_traceability(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(EXAMPLE, run_dir)
    page = report.write_report(run_dir).read_text()
    assert page.index("Client-bound points") < page.index("TPS per trace by mode")
    assert 'data-family="dc-single"' in page and "9,754" in page and "8,569" in page
    assert "2004-2008 hardware" in page
    assert "Comparison between modes" in page and "relative CPU benefit" in page
    assert "From samples to numbers" in page and page.count("= summary") >= 12 + 1
    assert "≠ summary" not in page
    assert "seed 2026" in page
    assert "estimate: CPU time x clock (no hardware counters)" in page
    assert "service demand" in page
    for needle in ("http://", "https://", "<script", "<link", "src=", "@import"):
        assert needle not in page, needle
    assert "url(" not in page.replace("url(#", "")  # only references inside inline SVGs


def test_damaged_samples_do_not_stop_the_report(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(EXAMPLE, run_dir)
    (run_dir / "points" / "p003" / "samples.jsonl").write_text('{"t": 1}\n{"t": 2, "cpu"\n')
    page = report.write_report(run_dir).read_text()
    assert "per-second samples could not be read" in page
    assert 'data-family="dc-single"' in page


def test_compare_two_runs(tmp_path: Path) -> None:
    rows_a = [{"trace": "t", "mode": "on", "repetition": r, "tps": v}
              for r, v in ((1, 90.0), (2, 110.0))]
    rows_b = [{"trace": "t", "mode": "on", "repetition": r, "tps": v}
              for r, v in ((1, 180.0), (2, 220.0))]
    a = _write_run(tmp_path / "a", rows_a, _synthetic(rows_a))
    man_b = _synthetic(rows_b)
    man_b["host"] = {"kernel": "7.0"}
    b = _write_run(tmp_path / "b", rows_b, man_b)
    table = compare.compare_runs(load.load_run(a), load.load_run(b))
    assert table.loc[0, "tps_change"] == pytest.approx(100.0)
    half = 100 * 4.303 * 2 * math.sqrt(0.02)
    assert table.loc[0, "tps_high"] == pytest.approx(100 + half, rel=1e-3)
    out = compare.write_compare(a, b, tmp_path / "c.html")
    page = out.read_text()
    assert "+100.0 %" in page and "host.kernel" in page and "7.0" in page
    other = _write_run(tmp_path / "o", rows_a, _synthetic(rows_a, name="other"))
    with pytest.raises(compare.CompareError, match="same experiment"):
        compare.write_compare(a, other)


def test_compare_pfs_runs_per_phase(tmp_path: Path) -> None:
    a = synthetic_runs.family_run(tmp_path / "a", "pfs-concurrent")
    b = synthetic_runs.family_run(tmp_path / "b", "pfs-concurrent")
    table = compare.compare_runs(load.load_run(a), load.load_run(b))
    assert set(table["phase"]) == {"read", "write"} and len(table) == 2 * 2 * 4 * 2
    assert table["mb_per_s_change"].tolist() == pytest.approx([0.0] * len(table))


def test_report_shows_progress(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(EXAMPLE, run_dir)
    report.write_report(run_dir, load.stderr_progress("report: samples"))
    err = capsys.readouterr().err
    assert "12/12 points" in err and "s left" in err
    assert (run_dir / "report.html").is_file()


# --------------------------------------------------------------------------- the package


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import statement in a file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, [a.name for a in node.names]))
    return out


def test_analysis_has_no_cycles_no_private_names_and_no_runner() -> None:
    modules = {p.stem: p for p in (ROOT / "analysis").glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for module, names in _imports(path):
            # of tierbench only the statistics it shares with the stopping rule
            assert not module.startswith(("tierbench", "workloads")) or \
                module.startswith("tierbench.stats"), (name, module)
            if module == "analysis":
                deps |= {n for n in names if n in modules}
            elif module.startswith("analysis."):
                deps.add(module.split(".")[1])
                assert not [n for n in names if n.startswith("_")], (name, module, names)
        graph[name] = deps
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):  # no module.attribute access to another module's _name
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and \
                    isinstance(node.value, ast.Name) and node.value.id in set(modules) | {"specs"}:
                pytest.fail(f"analysis/{name}.py uses {node.value.id}.{node.attr}")

    def visit(node: str, stack: list[str]) -> None:
        assert node not in stack, " -> ".join(stack + [node])
        for dep in graph.get(node, ()):
            visit(dep, stack + [node])

    for name in graph:
        visit(name, [])
    assert "pfs_report" not in modules and "references" not in modules
