"""Tests for the analysis package: statistics by hand, loading, warm-up, figures, compare."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from analysis import compare, figures, load, references, report, stats, tables
from tierbench import cli

import synthetic_runs

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "quick" / "20261122T030944Z"
OLD = Path(__file__).parent / "data" / "run-example"


# --------------------------------------------------------------------------- statistics


@pytest.mark.parametrize(
    ("df", "want"), [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (10, 2.228), (30, 2.042)]
)
def test_t_quantile_matches_tables(df: int, want: float) -> None:
    assert stats.t_quantile(0.975, df) == pytest.approx(want, abs=5e-4)


def test_t_quantile_symmetry_limits_and_errors() -> None:
    assert stats.t_quantile(0.025, 4) == pytest.approx(-2.776, abs=5e-4)
    assert stats.t_quantile(0.95, 1) == pytest.approx(6.314, abs=5e-4)
    assert stats.t_quantile(0.975, 1e7) == pytest.approx(1.95996, abs=1e-4)
    assert stats.t_quantile(0.5, 3) == 0.0
    with pytest.raises(ValueError):
        stats.t_quantile(1.0, 3)


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
    half = stats.t_quantile(0.975, df) * 0.7 * math.sqrt(ua + ub)
    assert (r.low, r.high) == (pytest.approx(0.3 - half), pytest.approx(0.3 + half))
    assert stats.relative_cpu_benefit([0.5], [1.0]).value == pytest.approx(0.5)
    assert stats.relative_cpu_benefit([0.5], [1.0]).low is None  # one repetition: no CI
    exact = stats.relative_cpu_benefit([0.5, 0.5], [1.0, 1.0])
    assert exact.low == exact.high == pytest.approx(0.5)


def test_per_request_per_kb_and_cycles() -> None:
    assert stats.us_per_request(2.0, 1000) == pytest.approx(2000.0)
    assert stats.us_per_kb(1.0, 1024 * 1000) == pytest.approx(1000.0)
    assert math.isnan(stats.us_per_kb(1.0, 0))
    assert stats.nominal_hz("Intel(R) Xeon(R) Processor @ 2.50GHz") == 2.5e9
    assert stats.nominal_hz("AMD EPYC", mhz=3000) == 3e9
    assert stats.nominal_hz("AMD EPYC") is None
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
    assert p1["cycles_source"].startswith("estimate")


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


# --------------------------------------------------------------------------- tables, warnings


def test_group_stats_and_mode_comparison_on_the_example() -> None:
    run = load.load_run(EXAMPLE)
    g = tables.group_stats(run.points)
    row = g[(g["trace"] == "single-1m") & (g["mode"] == "offloads-on") & (g["metric"] == "tps")]
    a, b = 270.856, 290.942  # p006, p011
    assert row["mean"].iloc[0] == pytest.approx((a + b) / 2)
    assert row["ci_half"].iloc[0] == pytest.approx(12.706 * abs(a - b) / 2, rel=1e-4)
    base = tables.baseline_mode(["offloads-on", "offloads-off"], run.experiment)
    assert base == "offloads-off"
    cmp = tables.compare_modes(run.points, base).set_index("trace")
    off = (122.025 + 118.929) / 2  # p002, p007
    assert cmp.loc["single-1m", "tps_change_pct"] == pytest.approx(100 * ((a + b) / 2 / off - 1))
    assert cmp.loc["single-1m", "tps_change_low"] < cmp.loc["single-1m", "tps_change_pct"]


def _synthetic(rows: list[dict], *, name: str = "dc-test", traces: list | None = None) -> dict:
    return synthetic_runs.manifest(name, traces)


_write_run = synthetic_runs.write_run


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
    found = {(w.kind, w.where.split(" ")[0]) for w in tables.warnings_for(run.points)}
    assert ("client-bound", "p001") in found
    assert ("errors", "p002") in found
    assert ("failed", "p005") in found
    assert ("unstable", "t") in found  # on: CV of (100, 140) = 23.6 % > 10 %
    assert not any(k == "unstable" and "off" in w for k, w in found)
    page = report.write_report(run.dir).read_text()
    assert "Unstable results" in page and "TPS varies 24 %" in page


# --------------------------------------------------------------------------- figures


def _sweep(tmp_path: Path, name: str, traces: list, rows: list[dict]) -> load.Run:
    return load.load_run(_write_run(tmp_path / name, rows, _synthetic(rows, name=name,
                                                                      traces=traces)))


def test_family_from_name_and_structure() -> None:
    assert figures.family_of("quick") == "dc-single"
    assert figures.family_of("dc-zipf-ioat") == "dc-zipf"
    assert figures.family_of("pfs-concurrent") == "pfs"
    assert figures.family_of("net-conns") == "net-conns"
    pts = pd.DataFrame({"alpha": [0.5, 0.9], "users": [1, 1]})
    assert figures.family_of("mine", pts) == "dc-zipf"
    assert figures.family_of("mine", pd.DataFrame({"users": [1, 4]})) == "dc-clients"


def test_fig_dc_zipf_has_one_point_per_alpha_and_mode(tmp_path: Path) -> None:
    alphas = [0.5, 0.75, 0.9, 0.95]
    traces = [{"name": f"z{a}", "kind": "zipf", "alpha": a} for a in alphas]
    rows = [{"trace": f"z{a}", "mode": m, "repetition": r, "tps": 1000 * a + (50 if m == "on"
                                                                              else 0) + r}
            for a in alphas for m in ("on", "off") for r in (1, 2)]
    run = _sweep(tmp_path, "dc-zipf", traces, rows)
    assert sorted(run.points["alpha"].unique()) == alphas  # from the trace specs
    fig = figures.family_figure(run.points, run.experiment)
    assert fig.family == "dc-zipf" and 'data-family="dc-zipf"' in fig.body
    assert fig.body.count("<circle") == 8  # 4 alphas x 2 modes
    assert "Zipf alpha" in fig.body and "2,212" in fig.body  # paper bars
    assert references.HARDWARE in fig.body


def test_fig_dc_clients_plots_tps_and_cpu_against_users(tmp_path: Path) -> None:
    rows = [{"trace": "single-16k", "mode": m, "users": u, "repetition": 1,
             "tps": 100.0 * u ** 0.5, "generator_cpu_pct": min(100.0, 10.0 * u)}
            for u in (1, 2, 4, 8, 16, 64, 256) for m in ("on", "off")]
    run = _sweep(tmp_path, "dc-clients", [{"name": "single-16k", "kind": "single",
                                           "size": 16384}], rows)
    fig = figures.family_figure(run.points, run.experiment)
    assert fig.body.count("<circle") == 2 * 7 * 2  # two panels, 7 user counts, 2 modes
    assert "log scale" in fig.body and "client CPU" in fig.body
    assert "14,996" in fig.body  # paper at 256 threads


def test_fig_dc_classes_groups_by_docroot(tmp_path: Path) -> None:
    rows = [{"trace": f"class-{c}", "mode": "default", "docroot": d, "repetition": 1,
             "tps": 100.0 * (c + 1)} for c in range(5) for d in ("tmpfs", "ext4", "orangefs")]
    run = _sweep(tmp_path, "dc-classes", [], rows)
    fig = figures.family_figure(run.points, run.experiment)
    assert fig.body.count('class="bar"') == 15 and "docroot" in fig.body
    assert "tmpfs" in fig.body and "class-4" in fig.body and "PVFS" in fig.caption


def test_fig_pfs_mb_per_s_vs_clients_per_operation(tmp_path: Path) -> None:
    rows = [{"trace": op, "mode": m, "users": c, "repetition": 1, "mb_per_s": 100.0 * c}
            for op in ("read", "write") for c in range(1, 7) for m in ("on", "off")]
    run = _sweep(tmp_path, "pfs-concurrent", [], rows)
    fig = figures.family_figure(run.points, run.experiment)
    assert fig.family == "pfs" and fig.body.count("<circle") == 2 * 6 * 2
    assert "aggregate MB/s" in fig.body and "731" in fig.body


def test_fig_net_conns_tables_throughput_and_cycles(tmp_path: Path) -> None:
    rows = [{"trace": w, "mode": "on", "users": c, "repetition": r, "mb_per_s": 100.0 + r,
             "bytes_moved": 1024 * 1000, "cpu_s_servers": 0.001 * r}
            for w in ("write-1k", "write-64k") for c in (1, 100) for r in (1, 2)]
    man = _synthetic(rows, name="net-conns")
    man["host"] = {"cpu_model": "Test CPU @ 2.00GHz"}
    run = load.load_run(_write_run(tmp_path / "n", rows, man))
    fig = figures.family_figure(run.points, run.experiment)
    assert 'data-family="net-conns"' in fig.body and "write-64k" in fig.body
    # throughput: mean of 101 and 102 MB/s x 8 = 812 Mb/s; CI half = 12.706 x 0.5 x 8
    assert "812 ± 50.8" in fig.body
    # cycles/KB: 0.0015 s x 2 GHz / 1000 KB = 3000
    assert "3,000" in fig.body and "estimate: CPU time x nominal 2.00 GHz" in fig.caption
    page = report.write_report(run.dir).read_text()
    assert "11,792" in page  # the paper's 1-connection cycles/KB
    assert "on 812 ± 51" in page  # measured beside it: write-64k, 1 connection, Mb/s


# --------------------------------------------------------------------------- report, compare


@pytest.mark.parametrize("family", figures.FAMILIES)
def test_report_of_each_family_has_its_figure(family: str, tmp_path: Path) -> None:
    run_dir = synthetic_runs.family_run(tmp_path, family)
    page = report.write_report(run_dir).read_text()
    assert f'data-family="{family}"' in page
    assert "Paper reference" in page and "2004-2008 hardware" in page


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
    for needle in ("http://", "https://", "<script", "<link", "src=", "url(", "@import"):
        assert needle not in page, needle


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
    assert cli.main(["compare", str(a), str(b), "-o", str(tmp_path / "c.html")]) == 0
    page = (tmp_path / "c.html").read_text()
    assert "+100.0 %" in page and "host.kernel" in page and "7.0" in page
    other = _write_run(tmp_path / "o", rows_a, _synthetic(rows_a, name="other"))
    assert cli.main(["compare", str(a), str(other)]) == 2


def test_cli_report_shows_progress(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(EXAMPLE, run_dir)
    assert cli.main(["report", str(run_dir)]) == 0
    err = capsys.readouterr().err
    assert "12/12 points" in err and "s left" in err
    assert (run_dir / "report.html").is_file()
