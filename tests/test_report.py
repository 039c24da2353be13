"""Tests for analysis.report against the hand-written run-example fixture."""

from __future__ import annotations

import csv
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from analysis import load, tables
from analysis.report import render_report, write_report

FIXTURE = Path(__file__).parent / "data" / "run-example"


@pytest.fixture
def rows() -> list[dict]:
    return load.read_summary_rows(FIXTURE / "summary.csv")


@pytest.fixture
def manifest() -> dict:
    return json.loads((FIXTURE / "manifest.json").read_text(encoding="utf-8"))


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(FIXTURE, target)
    return target


def sections(page: str) -> list[str]:
    return re.findall(r'<section class="group".*?</section>', page, flags=re.S)


def warnings_part(page: str) -> str:
    """The part of the page between the header and the family figure."""
    return page[page.index("</header>") : page.index('<div class="card" id="figure"')]


def rewrite_csv(path: Path, edit: Callable[[list[list[str]]], None]) -> None:
    with path.open(newline="", encoding="utf-8") as handle:
        table = list(csv.reader(handle))
    edit(table)
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, lineterminator="\n").writerows(table)


def test_load_converts_types() -> None:
    pts = load.load_run(FIXTURE).points
    assert len(pts) == 12
    first = pts.iloc[0]
    assert first["point"] == "p001" and first["trace"] == "static-1k"
    assert first["repetition"] == 1
    assert first["tps"] == pytest.approx(4125.3)
    assert first["bytes_moved"] == 157668966
    assert first["client_bound"] is False and pts.iloc[1]["client_bound"] is True


def test_aggregation_matches_hand_computed_means() -> None:
    pts = load.load_run(FIXTURE).points
    g = tables.group_stats(pts).set_index(["trace", "mode", "metric"])["mean"]
    assert list(dict.fromkeys(zip(pts["trace"], pts["mode"]))) == [
        ("static-1k", "offload-on"), ("static-1k", "offload-off"),
        ("static-256k", "offload-on"), ("static-256k", "offload-off"),
        ("mixed-api", "offload-on"), ("mixed-api", "offload-off")]
    on = ("static-1k", "offload-on")  # p001, p002
    assert g[(*on, "tps")] == pytest.approx((4125.3 + 4188.9) / 2)  # 4157.1
    assert g[(*on, "p99_ms")] == pytest.approx((41.2 + 39.7) / 2)
    assert g[(*on, "server_cpu_us_per_kb")] == pytest.approx((113.46 + 113.02) / 2)
    assert g[(*on, "cpu_s_web")] == pytest.approx((7.85 + 7.96) / 2)
    off = ("static-256k", "offload-off")  # p007, p008
    assert g[(*off, "tps")] == pytest.approx((604.7 + 611.2) / 2)
    assert g[(*off, "server_cpu_us_per_kb")] == pytest.approx((5.1 + 5.08) / 2)
    assert g[(*off, "host_cpu_us_per_kb")] == pytest.approx((31.65 + 31.52) / 2)
    assert g[(*off, "cpu_s_proxy")] == pytest.approx((14.96 + 15.08) / 2)
    mixed = ("mixed-api", "offload-on")  # p009, p010
    assert g[(*mixed, "p50_ms")] == pytest.approx((25.1 + 25.4) / 2)
    assert g[(*mixed, "generator_cpu_pct")] == pytest.approx((69.4 + 68.8) / 2)
    assert g[(*mixed, "mb_per_s")] == pytest.approx((19.505 + 19.309) / 2)


def test_rendered_tables_show_the_aggregates(rows: list[dict], manifest: dict) -> None:
    first = sections(render_report(rows, manifest))[0]
    assert "static-1k" in first
    # TPS mean ± 95 % CI half-width; for n = 2: t_{0.975,1} x |a - b| / 2
    assert "4,157.1" in first and "± 404.1" in first  # 12.706 x 31.8, p001/p002
    assert "3,969.8" in first and "± 218.5" in first  # 12.706 x 17.2, p003/p004
    assert "40.45" in first  # p99 mean of offload-on
    assert "113.2" in first  # server CPU µs/KB of offload-on, 1 decimal


def test_sections_and_charts_follow_the_experiment_order(rows: list[dict],
                                                         manifest: dict) -> None:
    manifest["report"]["order"] = {"trace": ["mixed-api", "static-1k", "static-256k"]}
    page = render_report(rows, manifest)
    found = sections(page)
    assert len(found) == 3
    assert page.count('<svg class="chart group"') == 3
    assert page.count('<svg class="chart family"') == 1
    for section, trace in zip(found, ["mixed-api", "static-1k", "static-256k"], strict=True):
        assert trace in section
        assert section.count("<svg") == 1
        # 2 modes x (TPS panel + host CPU µs/KB panel), each bar with an id
        assert len(re.findall(r'id="g\d-p\d-bar-s\d-c\d"', section)) == 4
        assert "TPS (requests/s)" in section and "host CPU µs/KB" in section
        assert "CPU cost per request and per KB" in section and "service demand" in section
        modes = re.findall(r'<td class="l"><span class="sw".*?</td>', section)
        assert len(modes) == 4  # mode table and cost table
        assert "offload-on" in modes[0] and "offload-off" in modes[1]
    fam = page[page.index('class="chart family"'):]
    ticks = [t for t in re.findall(r">(static-1k|static-256k|mixed-api)<", fam)]
    assert ticks[:3] == ["mixed-api", "static-1k", "static-256k"]


def test_client_bound_warning_present_when_a_row_is_client_bound(
    rows: list[dict], manifest: dict
) -> None:
    top = warnings_part(render_report(rows, manifest))
    assert "use a native engine" in top
    assert "Client-bound points (1)" in top
    assert "p002" in top and "p001" not in top


def test_no_client_bound_warning_without_client_bound_rows(
    rows: list[dict], manifest: dict
) -> None:
    for row in rows:
        row["client_bound"] = "false"
    page = render_report(rows, manifest)
    assert "use a native engine" not in page
    assert "Client-bound points" not in page
    assert "No warnings" in page


def test_a_window_not_shown_steady_is_a_warning_and_its_empty_reason_no_alarm(
    rows: list[dict], manifest: dict
) -> None:
    for row in rows:
        row["client_bound"] = "false"
        row["unsteady"], row["unsteady_why"], row["warmup_s"] = "false", "", 5
    page = render_report(rows, manifest)
    assert "No warnings" in page and "not shown steady" not in page
    rows[2]["unsteady"] = "true"
    rows[2]["unsteady_why"] = "the window's trend moves its mean by +12 %"
    top = warnings_part(render_report(rows, manifest))
    assert "Points with errors or missing values (1)" in top
    assert "window not shown steady: the window&#39;s trend moves its mean by +12 %" in top
    assert rows[2]["point"] in top


def test_a_point_dominated_by_cache_misses_is_flagged_with_its_share(
    rows: list[dict], manifest: dict
) -> None:
    """Issue 44: a cold_cache point is a warning naming its miss share; none without it."""
    for row in rows:
        row["client_bound"] = "false"
        row["cache_miss_share"], row["cold_cache"] = 0.1, "false"
    page = render_report(rows, manifest)
    assert "No warnings" in page and "missed the caches" not in page
    rows[1]["cache_miss_share"], rows[1]["cold_cache"] = 0.83, "true"
    top = warnings_part(render_report(rows, manifest))
    assert "Points with errors or missing values (1)" in top
    assert "83 % of the window missed the caches" in top and rows[1]["point"] in top


def test_empty_advice_of_points_that_were_not_client_bound_is_no_alarm(
    rows: list[dict], manifest: dict
) -> None:
    """Issue 16: client_bound_advice is empty unless the point was client-bound."""
    for row in rows:
        row["client_bound_advice"] = "raise load.processes" if row["client_bound"] == "true" \
            else ""
        row["target_rate"] = ""  # a closed-loop point has no target rate
    top = warnings_part(render_report(rows, manifest))
    assert "missing" not in top and "Points with errors or missing values" not in top
    assert "raise load.processes" in top  # the advice is shown with the client-bound point
    rows[4]["p99_ms"] = ""  # a measurement that does apply and is missing: still flagged
    top = warnings_part(render_report(rows, manifest))
    assert "Points with errors or missing values (1)" in top and "<code>p99_ms</code>" in top
    assert "client_bound_advice" not in top


def test_trace_name_is_escaped(rows: list[dict], manifest: dict) -> None:
    evil = "<script>alert('x')</script>"
    for row in rows[:4]:
        row["trace"] = evil
    manifest["experiment"]["name"] = "<b>bold</b>"
    page = render_report(rows, manifest)
    assert "<script" not in page and "<b>bold</b>" not in page
    assert "&lt;script&gt;" in page and "&lt;b&gt;bold&lt;/b&gt;" in page
    assert len(sections(page)) == 3


def test_output_is_self_contained(run_dir: Path) -> None:
    page = write_report(run_dir).read_text(encoding="utf-8")
    for needle in ("http://", "https://", "<script", "<link", "src=", "@import"):
        assert needle not in page, needle
    assert "url(" not in page.replace("url(#", "")
    assert "<style>" in page and "<?xml" not in page and "<!DOCTYPE svg" not in page
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids)), "ids repeat across the inline figures"


def test_write_report_writes_report_html_with_provenance(run_dir: Path) -> None:
    out = write_report(run_dir)
    assert out == run_dir / "report.html" and out.is_file()
    page = out.read_text(encoding="utf-8")
    assert "<h1>offload-compare</h1>" in page
    assert "20241121-141503-offload-compare" in page
    assert "three request mixes" in page  # description
    prov = page[page.index("<h2>Provenance</h2>") :]
    for text in (
        "6.1.0-27-amd64",
        "3f9c2a1d7e5b4c08a6f1e2d3c4b5a69788f0e1d2",
        "2.26.1",
        "sha256:8d1f0b7c",
        "12 points in the manifest",
        "loadgen_cpus",
    ):
        assert text in prov, text
    assert "p012" not in prov  # the per-point entries are not rendered
    assert "3.80 GHz from the CPU model" in page  # cycles per KB estimated from its clock


def test_empty_tps_does_not_crash_and_is_warned(run_dir: Path) -> None:
    def blank_tps(table: list[list[str]]) -> None:
        table[3][table[0].index("tps")] = ""  # p003

    rewrite_csv(run_dir / "summary.csv", blank_tps)
    pts = load.load_run(run_dir).points
    assert pts["tps"].isna().tolist()[2]
    sub = pts[(pts["trace"] == "static-1k") & (pts["mode"] == "offload-off")]
    assert tables.estimate(sub, "tps").mean == pytest.approx(3987.0)
    page = write_report(run_dir).read_text(encoding="utf-8")
    top = warnings_part(page)
    assert "Points with errors or missing values (1)" in top
    assert "p003" in top and "<code>tps</code>" in top


def test_failed_point_with_extra_error_value(run_dir: Path) -> None:
    def fail_p004(table: list[list[str]]) -> None:
        header = table[0]
        row = table[4]
        keep = {"point", "trace", "mode", "repetition", "engine", "users", "window_s"}
        table[4] = [v if h in keep else "" for h, v in zip(header, row, strict=True)]
        table[4].append("web container exited with code 137")

    rewrite_csv(run_dir / "summary.csv", fail_p004)
    rows = load.read_summary_rows(run_dir / "summary.csv")
    assert rows[3]["error"] == "web container exited with code 137"
    pts = load.load_run(run_dir).points
    sub = pts[(pts["trace"] == "static-1k") & (pts["mode"] == "offload-off")]
    assert len(sub) == 2 and int(sub["failed"].sum()) == 1
    assert tables.estimate(sub, "tps").mean == pytest.approx(3952.6)
    page = write_report(run_dir).read_text(encoding="utf-8")
    top = warnings_part(page)
    assert "p004" in top and "failed: web container exited with code 137" in top
    assert "(1 failed)" in sections(page)[0]


def test_extra_tier_column_appears(run_dir: Path) -> None:
    def add_db(table: list[list[str]]) -> None:
        at = table[0].index("cpu_s_web") + 1
        for i, row in enumerate(table):
            row.insert(at, "cpu_s_db" if i == 0 else f"{3 + i / 10:.1f}")

    rewrite_csv(run_dir / "summary.csv", add_db)
    page = write_report(run_dir).read_text(encoding="utf-8")
    for section in sections(page):
        assert 'title="cpu_s_db"' in section
        assert 'title="cpu_us_per_kb_db"' in section  # and its cost per KB
    assert "3.15" in sections(page)[0]  # mean of p001/p002 cpu_s_db: (3.1 + 3.2) / 2
    points = page[page.index("<h2>All points</h2>") : page.index("<h2>Provenance</h2>")]
    assert 'title="cpu_s_db"' in points


def test_render_without_manifest_or_rows_does_not_crash() -> None:
    page = render_report([], {})
    assert "tierbench run" in page and "No points" in page
    page = render_report([{"point": "p1", "trace": "t", "mode": "m", "tps": "12.5"}], {})
    assert page.count('<svg class="chart group"') == 1
    assert 'data-family="generic"' in page and "report spec generic" in page


def test_a_cluster_runs_cpu_per_node_is_a_table_per_section(rows, manifest) -> None:
    for i, r in enumerate(rows):  # as a cluster run writes them: each node's CPU
        r.update({"node_node2_busy_s": 1.5 + i, "node_node2_usr_pct": 10.0,
                  "node_node2_sys_pct": 20.0, "node_node2_softirq_pct": 5.0,
                  "node_node2_idle_pct": 65.0, "node_node3_busy_s": 0.5,
                  "node_node3_usr_pct": 1.0, "node_node3_sys_pct": 2.0,
                  "node_node3_softirq_pct": 0.0, "node_node3_idle_pct": 97.0})
    first = sections(render_report(rows, manifest))[0]
    table = first.split("CPU per node (cluster)")[1].split("</table>")[0]
    assert table.count("<th colspan=\"5\">") == 2 and "node2" in table and "node3" in table
    assert "97.0" in table and "65.0" in table
    assert "CPU per node" not in sections(render_report(load.read_summary_rows(
        FIXTURE / "summary.csv"), manifest))[0]


def test_a_request_count_run_says_so_in_the_header(rows: list[dict], manifest: dict) -> None:
    head = lambda page: page[:page.index("</header>")]  # noqa: E731
    assert "request-count run" not in head(render_report(rows, manifest))
    manifest["experiment"]["load"] = {"users": [1, 64], "requests_per_client": 10000}
    manifest["experiment"]["scale"] = 0.5
    page = head(render_report(rows, manifest))
    assert "request-count run: 10,000 requests per client (1 client: 10,000, 64 clients: " \
        "640,000 a point)" in page
    assert "scaled by 0.5 (--scale)" in page


def test_a_point_with_one_cpu_saturated_by_softirq_is_warned_of(
    rows: list[dict], manifest: dict
) -> None:
    """Issue 43: softirq_bound is flagged as client_bound is; the offload figures that do not
    apply to a point (nothing sent) are not missing values."""
    for row in rows:
        row.update({"client_bound": "false", "softirq_bound": "false",
                    "cpu_max_irq_softirq_pct": "12", "stack_web_retrans_pct": "0.1"})
    rows[3].update({"softirq_bound": "true", "softirq_bound_cpu": "cpu1",
                    "cpu_max_irq_softirq_pct": "96.5", "stack_web_retrans_pct": ""})
    top = warnings_part(render_report(rows, manifest))
    block = top[top.index("One CPU saturated by interrupt work (1)"):]
    block = block[:block.index("</div>")]
    assert rows[3]["point"] in block and rows[2]["point"] not in block
    assert "cpu1, 96 % irq + softirq" in block
    assert "missing" not in top and "No warnings" not in top
    rows[3]["softirq_bound"] = "false"
    assert "One CPU saturated" not in render_report(rows, manifest)


def table_by_mode(rows: list[dict], manifest: dict, title: str,
                  values: Callable[[bool], dict[str, str]]) -> str:
    """The report's table titled ``title`` once each row has ``values(offloads on?)``; the
    report without those columns has no such table."""
    assert title not in render_report(rows, manifest)
    for row in rows:
        row.update(values("on" in row["mode"]))
    page = render_report(rows, manifest)
    part = page[page.index(title):]
    return part[:part.index("</table>")]


def test_the_per_cpu_and_offload_table_shows_each_modes_means(
    rows: list[dict], manifest: dict
) -> None:
    """Issue 43: per mode the per-CPU figures and each tier's offload figures, means of the
    repetitions; a run without those columns has no such table."""
    part = table_by_mode(rows, manifest, "what the offloads did", lambda on: {
        "cpu_max_busy_pct": "80", "cpu_max_irq_softirq_pct": "20",
        "net_rx_softirq_per_s": "1000", "net_rx_softirq_top_cpu_pct": "90",
        "softirq_bound": "false", "stack_web_segs_per_tx_packet": "30" if on else "1",
        "stack_web_bytes_per_tx_packet": "43000", "stack_web_rx_packets_per_skb": "1",
        "stack_web_retrans_pct": "0", "stack_web_drops": "0"})
    assert "web: what the offloads did" in part and "segments / tx packet" in part
    assert ">30.00<" in part and ">1.00<" in part and "43,000" in part


def test_the_why_table_gives_each_categorys_cpu_per_kb_by_mode(
    rows: list[dict], manifest: dict
) -> None:
    """Issue 43 with --profile categories: a category's share of the busy samples times the
    point's host CPU per KB, mean per mode."""
    part = table_by_mode(rows, manifest, "Why: where the CPU went", lambda on: {
        "host_cpu_us_per_kb": "10", "cat_samples": "1000",
        "cat_segmentation_pct": "5" if on else "30", "cat_data_copy_pct": "40",
        "cat_uncategorized_pct": "1"})
    assert "host CPU µs per KB" in part and "segmentation" in part
    assert ">0.50<" in part and ">3.00<" in part and ">4.00<" in part
