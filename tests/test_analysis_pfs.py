"""A parallel file system run (summary with read_* / write_* columns) through the one report:
phases, MB/s change and the receiving side's relative CPU benefit with intervals, problems,
the paper's numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

from analysis import report

import synthetic_runs


def fake_run(tmp_path: Path, integrity: str = "ok") -> Path:
    rows = []
    for mode, mbs, cpu in (("offloads-on", 300.0, 2.0), ("offloads-off", 150.0, 4.0)):
        for rep, jitter in ((1, 0.0), (2, 10.0), (3, -10.0)):
            for clients in (1, 2):
                rows.append(synthetic_runs.pfs_row(
                    mode, rep, {"read": mbs * clients + jitter, "write": mbs + jitter}, cpu,
                    io_servers=2, clients=clients, streams=clients, access="native"))
    rows[0]["integrity"] = integrity
    failed = synthetic_runs.pfs_row("offloads-on", 4, {}, 1.0, io_servers=2, clients=2)
    failed.update(integrity="not checked", error="read: 1 of 2 streams failed: x")
    rows.append(failed)
    man = synthetic_runs.manifest("pfs-concurrent", [], ("offloads-on", "offloads-off"),
                                  synthetic_runs.spec_of("pfs-concurrent"))
    man["kind"] = "pfs"
    man["experiment"]["pfs"] = {"test": "concurrent", "io_servers": [2], "strip_size": 65536,
                                "storage": "tmpfs", "access": "native"}
    man["orangefs"] = "v.2.10.0\nsha256 0123abcd"
    return synthetic_runs.write_run(tmp_path / "run", rows, man, web=False)


def section(page: str, phase: str) -> str:
    found = re.search(rf'<section class="group"[^>]*><h2><span class="muted">Phase</span> '
                      rf"{phase}</h2>.*?</section>", page, flags=re.S)
    assert found, phase
    return found.group(0)


def test_pfs_report_compares_modes_with_intervals_and_lists_problems(tmp_path: Path) -> None:
    page = report.write_report(fake_run(tmp_path)).read_text()
    reads, writes = section(page, "read"), section(page, "write")
    assert "offloads-on · N=2 · 1 clients" in reads and "aggregate MB/s" in reads
    assert "client CPU µs/KB" in reads and 'class="chart group"' in writes
    cmp = page[page.index('id="comparison"'): page.index("Sections:")]
    # offloads-on against the baseline offloads-off: twice the MB/s, half the CPU per KB,
    # so +100 % MB/s and a relative CPU benefit of (4 - 2) / 4 = +50 % (positive: less CPU)
    assert "baseline <b>offloads-off</b>" in cmp
    assert cmp.count("+100.0 %") == 4  # reads and writes, at 1 and 2 clients
    assert cmp.count("+50.0 %") == 4  # reads: client CPU/KB, writes: server CPU/KB
    assert "-50.0 %" not in cmp and "-100.0 %" not in cmp
    top = page[: page.index('id="figure"')]
    assert "p013" in top and "1 of 2 streams failed" in top
    assert "integrity: not checked" in top
    assert "000 §6.2.1" in page and "2004-2008 hardware" in page
    assert "test <b>concurrent</b>" in page and "sha256 0123abcd" in page
    assert page.count('<svg class="chart') >= 3  # family figure + one chart per phase
    assert "From samples to numbers" not in page  # no per-second card for PFS runs


def test_integrity_problems_are_listed_and_a_clean_run_says_so(tmp_path: Path) -> None:
    page = report.write_report(fake_run(tmp_path, integrity="stream 1 differs")).read_text()
    top = page[: page.index('id="figure"')]
    assert "p001" in top and "integrity: stream 1 differs" in top
    clean = synthetic_runs.family_run(tmp_path, "pfs-streams")
    page = report.write_report(clean).read_text()
    top = page[: page.index('id="figure"')]
    assert "28 of 28 points read <code>ok</code> in integrity" in top
    # write_* columns are empty in every row of a read-only test: not "missing values"
    assert "Points with errors or missing values" not in top


def test_pfs_run_without_a_spec_gets_a_generic_report(tmp_path: Path) -> None:
    """Today's runner writes no "report" key: phases then come from the read_*/write_* columns."""
    run_dir = synthetic_runs.family_run(tmp_path, "pfs-concurrent")
    man = json.loads((run_dir / "manifest.json").read_text())
    del man["report"]
    (run_dir / "manifest.json").write_text(json.dumps(man))
    page = report.write_report(run_dir).read_text()
    assert "report spec generic" in page and 'data-family="generic"' in page
    assert "<h2>MB/s by " in page
    assert '<span class="muted">Phase</span> read' in page
    assert '<span class="muted">Phase</span> write' in page
    assert "relative CPU benefit" in page and "Points with errors or missing values" not in page
