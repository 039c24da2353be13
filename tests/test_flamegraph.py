"""A flame graph per profiled point (issue 43): folded stacks of known counts turned into
plotly's icicle nodes (values that add up, small frames folded into their callers), a page per
point with plotly.js written once per run, and the report linking each point to its page."""

from __future__ import annotations

import csv
import json
import os
from collections import Counter
from pathlib import Path

from analysis import flamegraph, report

FOLDED = ("web;entry_SYSCALL_64;tcp_sendmsg;copy_user 60\n"
          "web;entry_SYSCALL_64;tcp_sendmsg;csum_partial 30\n"
          "web;entry_SYSCALL_64;tcp_sendmsg;rare_leaf 1\n"
          "proxy;main 9\n"
          "a line that does not parse\n")


def test_folded_stacks_become_nodes_whose_values_add_up() -> None:
    stacks = flamegraph.read_folded_text(FOLDED)
    assert sum(stacks.values()) == 100
    node = chains(*flamegraph.frames(stacks, min_share=0.05))
    assert node["web"] == 91 and node["proxy"] == 9
    assert node["web;entry_SYSCALL_64;tcp_sendmsg"] == 91
    assert node["web;entry_SYSCALL_64;tcp_sendmsg;copy_user"] == 60
    assert node["web;entry_SYSCALL_64;tcp_sendmsg;csum_partial"] == 30
    assert "web;entry_SYSCALL_64;tcp_sendmsg;rare_leaf" not in node  # 1 % < 5 %: its caller's
    assert len(node) == 7


def chains(ids: list[str], labels: list[str], parents: list[str], values: list[int]
           ) -> dict[str, int]:
    """The icicle's nodes as chain -> value, each chain rebuilt from its parents (every parent
    a node listed before it, the processes with none)."""
    chain: dict[str, str] = {}
    for i, label, parent in zip(ids, labels, parents, strict=True):
        assert parent == "" or parent in chain
        chain[i] = (chain[parent] + ";" if parent else "") + label
    return {chain[i]: v for i, v in zip(ids, values, strict=True)}


def run_with_points(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    for pid, folded in (("p001", FOLDED), ("p002", ""), ("p003", None)):
        (run / "points" / pid).mkdir(parents=True)
        if folded is not None:
            (run / "points" / pid / flamegraph.FOLDED).write_text(folded)
    rows = [{"point": p, "trace": "single-1m", "mode": "offloads-on", "repetition": 1,
             "tps": 100.0, "cat_data_copy_pct": 60.0, "cat_samples": 100}
            for p in ("p001", "p002", "p003")]
    with (run / "summary.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (run / "manifest.json").write_text(json.dumps({"experiment": "x", "run_id": "r"}))
    return run


def test_a_page_per_profiled_point_plotly_once_and_the_report_links_them(
        tmp_path: Path) -> None:
    run = run_with_points(tmp_path)
    report.write_report(run)
    page = run / "points" / "p001" / flamegraph.PAGE
    html = page.read_text()
    assert "../../plotly.min.js" in html and "icicle" in html and "csum_partial" in html
    assert (run / flamegraph.PLOTLY_JS).stat().st_size > 1_000_000
    assert not (run / "points" / "p002" / flamegraph.PAGE).exists()  # no samples: no page
    assert not (run / "points" / "p003" / flamegraph.PAGE).exists()
    page_html = (run / "report.html").read_text()
    assert 'href="points/p001/flamegraph.html"' in page_html
    assert "points/p002/flamegraph.html" not in page_html


def test_a_page_is_rewritten_only_when_its_stacks_are_newer(tmp_path: Path) -> None:
    run = run_with_points(tmp_path)
    assert flamegraph.write_all(run, {}) == {"p001": "points/p001/flamegraph.html"}
    page = run / "points" / "p001" / flamegraph.PAGE
    page.write_text("kept")
    flamegraph.write_all(run, {})
    assert page.read_text() == "kept"
    folded = run / "points" / "p001" / flamegraph.FOLDED
    folded.write_text(FOLDED)
    os.utime(folded, (page.stat().st_mtime + 5, page.stat().st_mtime + 5))
    flamegraph.write_all(run, {})
    assert page.read_text() != "kept"


def test_counter_input_keeps_chains_apart() -> None:
    got = flamegraph.frames(Counter({("a", "b"): 3, ("a", "c"): 1}), min_share=0.0)
    assert chains(*got) == {"a": 4, "a;b": 3, "a;c": 1}
