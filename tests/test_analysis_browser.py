"""Reports opened in headless Chromium: screenshotted, every figure laid out, no console errors.
Needs Debian's `chromium` package (setup/host-tools.sh installs it)."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from analysis import report

import synthetic_runs

ROOT = Path(__file__).resolve().parent.parent
# A real run of an earlier `quick` (Locust, 12 points; once the shipped example): the analysis
# is checked against figures computed by hand from it.
EXAMPLE = ROOT / "tests" / "data" / "quick-locust-run"
WRAPPER = """<html><body><iframe id="f" src="report.html" style="width:1300px;height:3000px">
</iframe><script>
document.getElementById("f").addEventListener("load", () => {
  const d = document.getElementById("f").contentDocument;
  const out = [...d.querySelectorAll("svg.chart.group, div.family, div.loadcurve")].map(s => {
    const r = s.getBoundingClientRect();
    return {cls: s.getAttribute("class"), w: Math.round(r.width), h: Math.round(r.height),
            marks: s.querySelectorAll("rect,path,circle,td").length};
  });
  const pre = document.createElement("pre");
  pre.id = "result";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script></body></html>
"""


def chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium with a throw-away profile and no background network traffic."""
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail("chromium is not installed: apt-get install chromium (make setup does it)")
    argv = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run",
            f"--user-data-dir={profile}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def console_lines(stderr: str) -> list[str]:
    """Console messages Chromium logs with --enable-logging=stderr --v=0."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def png_pixels(path: Path) -> tuple[int, int, bytes]:
    """Width, height and the decompressed (filtered) scanlines of a PNG file."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, size = 8, b"", (0, 0)
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return size[0], size[1], zlib.decompress(idat)


@pytest.fixture
def built(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(EXAMPLE, run_dir)
    return report.write_report(run_dir)


def test_console_detector_sees_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.html"
    bad.write_text('<html><body><script>console.error("boom")</script></body></html>')
    res = chromium(tmp_path / "profile", "--enable-logging=stderr", "--v=0", "--dump-dom",
                   bad.as_uri())
    assert any("boom" in line for line in console_lines(res.stderr)), res.stderr[-2000:]


def screenshot_ok(page: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    res = chromium(tmp_path / "shot-profile", "--enable-logging=stderr", "--v=0",
                   f"--screenshot={shot}", "--window-size=1300,2000", page.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    assert console_lines(res.stderr) == []
    width, height, pixels = png_pixels(shot)
    assert (width, height) == (1300, 2000)
    assert len(set(pixels)) > 50, "the screenshot is blank"


def test_report_screenshot_has_no_console_errors(built: Path, tmp_path: Path) -> None:
    screenshot_ok(built, tmp_path)


def test_pfs_report_screenshot_has_no_console_errors(tmp_path: Path) -> None:
    screenshot_ok(report.write_report(synthetic_runs.family_run(tmp_path, "pfs-concurrent")),
                  tmp_path)


def rendered(page: Path, profile: Path) -> tuple[list[dict], list[str]]:
    """Size and mark count of every figure (svg.chart.group, div.family, div.loadcurve) as laid out by
    Chromium, and the console messages of the page."""
    wrapper = page.parent / "wrapper.html"
    wrapper.write_text(WRAPPER.replace("report.html", page.name))
    res = chromium(profile, "--allow-file-access-from-files", "--virtual-time-budget=10000",
                   "--enable-logging=stderr", "--v=0", "--dump-dom", wrapper.as_uri())
    found = re.search(r'<pre id="result">(.*?)</pre>', res.stdout, flags=re.S)
    assert found, res.stderr[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"')), console_lines(res.stderr)


def expected_figures(page: str) -> int:
    return page.count('<svg class="chart group"') + page.count('<div class="family"') + \
        page.count('<div class="loadcurve"')


def test_every_figure_renders(built: Path, tmp_path: Path) -> None:
    page = built.read_text(encoding="utf-8")
    assert expected_figures(page) == 4  # the family figure + one chart per trace
    figs, console = rendered(built, tmp_path / "profile")
    assert console == []
    assert len(figs) == 4 and figs[0]["cls"] == "family"
    for fig in figs:
        assert fig["w"] > 400 and fig["h"] > 200 and fig["marks"] > 4, fig


@pytest.mark.parametrize("name", synthetic_runs.FAMILIES)
def test_family_figures_render(name: str, tmp_path: Path) -> None:
    page = report.write_report(synthetic_runs.family_run(tmp_path, name))
    figs, console = rendered(page, tmp_path / "profile")
    assert console == []
    assert len(figs) == expected_figures(page.read_text(encoding="utf-8"))
    fam = [f for f in figs if f["cls"] == "family"]
    assert len(fam) == 1, figs
    assert fam[0]["w"] > 300 and fam[0]["h"] > 100 and fam[0]["marks"] > 4, fam
    for fig in figs:
        assert fig["w"] > 300 and fig["h"] > 100 and fig["marks"] >= 1, fig


def test_missing_chromium_fails_with_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    with pytest.raises(pytest.fail.Exception, match="apt-get install chromium"):
        chromium(tmp_path)


def test_the_report_of_millions_of_requests_stays_light_and_renders(tmp_path: Path) -> None:
    """A run whose point holds 2 million per-request records (synthesised): the report is
    written from them in seconds, its size does not grow with the requests (no per-request
    data in it), and Chromium lays out its figures."""
    import time

    from tierbench import scale

    pages = {}
    for n in (20_000, 2_000_000):
        run_dir = tmp_path / f"run-{n}"
        scale.synthetic_point(run_dir, n)
        t = time.monotonic()
        pages[n] = report.write_report(run_dir)
        assert time.monotonic() - t < 30, "the report took too long"
    small, large = (pages[n].stat().st_size for n in (20_000, 2_000_000))
    assert abs(large - small) < 0.05 * small, (small, large)
    t = time.monotonic()
    figs, console = rendered(pages[2_000_000], tmp_path / "profile")
    assert time.monotonic() - t < 30
    assert console == [] and figs
    for fig in figs:
        assert fig["w"] > 300 and fig["h"] > 100 and fig["marks"] >= 1, fig
