"""A parallel file system run (summary with read_* / write_* columns) through the one report:
phases, MB/s change and the receiving side's relative CPU benefit with intervals, problems,
the paper's numbers."""

from __future__ import annotations

import csv
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


def send_run(tmp_path: Path) -> Path:
    """A pfs-basic run with the send phases (pfs.send): at every point sendfile moves twice
    sendrw's MB/s with half its sender CPU per MB; the native library's points have none."""
    rows = []
    for fs in ("disk", "orangefs", "orangefs-native"):
        for buffer in (65536, 196608):
            for rep in (1, 2):
                row = synthetic_runs.pfs_row(
                    "offloads-on", rep, {"read": 100.0 + rep, "write": 90.0 + rep}, 1.0,
                    test="basic", io_servers=3, clients=1, streams=1, filesystem=fs,
                    buffer=buffer, access="native" if fs == "orangefs-native" else "posix")
                for phase, mbs, cpu in (("sendrw", 50.0, 0.5), ("sendfile", 100.0, 0.25)):
                    own = ({"mb_per_s": mbs * buffer / 65536 + rep, "bytes": 16 << 20, "s": 1.0,
                            "sender_cpu_s": 0.1, "sender_cpu_ms_per_mb": cpu, "sink_cpu_s": 0.1,
                            "client_cpu_us_per_kb": 1.0, "failed_streams": 0}
                           if fs != "orangefs-native" else {})
                    row.update({f"{phase}_{k}": own.get(k) for k in (
                        "mb_per_s", "bytes", "s", "sender_cpu_s", "sender_cpu_ms_per_mb",
                        "sink_cpu_s", "client_cpu_us_per_kb", "failed_streams")})
                rows.append(row)
    man = synthetic_runs.manifest("pfs-basic", [], ("offloads-on",),
                                  synthetic_runs.spec_of("pfs-basic"))
    man["kind"] = "pfs"
    man["experiment"]["pfs"] = {"test": "basic", "io_servers": [3], "strip_size": 65536,
                                "storage": "ide", "send": True}
    return synthetic_runs.write_run(tmp_path / "run", rows, man, web=False)


def test_the_send_phases_get_their_sections_cpu_panel_and_fig_4_5_rows(tmp_path: Path) -> None:
    """004 §4.2 Fig. 4-5 in the pfs-basic family: a section per send phase with the sender's CPU
    per MB, a panel of it by buffer, and the paper's rows (no numbers in 004's text: its words)
    beside the measured sendfile against sendrw and 192 KB against 64 KB."""
    page = report.write_report(send_run(tmp_path)).read_text()
    for phase in ("sendrw", "sendfile"):
        assert "sender CPU ms/MB" in section(page, phase)
    assert "the sender&#39;s CPU per MB sent" in page or "the sender's CPU per MB sent" in page
    ref = page[page.index("sendfile vs read/write (Fig. 4a"):]
    ref = re.sub(r"<[^>]+>", " ", ref[: ref.index("</table>")])
    text = " ".join(ref.split())
    # ext3 and PVFS at 64 KB: sendfile 101.5 vs sendrw 51.5 on average over the repetitions
    assert text.count("sendfile 102 vs sendrw 51.5: change +97.1 %") == 2, text
    assert "sendfile &#34;unstable&#34; (004 §4.2)" in text
    # Fig. 5a and 5b: PVFS at 192 KB (3 x 50 + rep, 3 x 100 + rep) against 64 KB
    assert "196608 152 vs 65536 51.5: change +194.2 %" in text, text
    assert "196608 302 vs 65536 102: change +197.0 %" in text, text
    # the sender's CPU per MB: half with sendfile, and 004 measured none
    assert text.count("sendfile 0.25 vs sendrw 0.50: change -50.0 %") == 2, text
    assert "not measured in 004" in text
    # the native library's points ran no send phase: their empty send columns are not missing
    assert "Points with errors or missing values" not in page[: page.index('id="figure"')]
    # but a point that ran its send phases and lost a value is listed
    run = send_run(tmp_path / "lost")
    with (run / "summary.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    lost = next(r for r in rows if r["filesystem"] == "disk")
    lost["sendfile_sender_cpu_ms_per_mb"] = ""
    lost["sendrw_mb_per_s"] = ""
    with (run / "summary.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    page = report.write_report(run).read_text()
    top = page[: page.index('id="figure"')]
    assert "Points with errors or missing values (1)" in top
    assert "missing sendrw_mb_per_s" in " ".join(re.sub(r"<[^>]+>", " ", top).split())
