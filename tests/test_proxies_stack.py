"""stack.proxies on the real stack: 4 caching Apache proxies in front of 3 web servers on one
host through `tierbench run` with wrk (each thread bound to one proxy): every proxy served
requests (its own access log and its CPU), the load spread evenly over them, every web server
served, the proxy tier's CPU in every sample the sum of its proxies', and the proxies' cache
hits summed in the point's row.

Needs root, Docker with Compose v2 and the images (`make test` provides them)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from stack_env import cli_env, summary_rows, tierbench

from tierbench.placement import model

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = ROOT / "tests" / "data" / "experiments" / "proxies-short.yml"
PROXIES = ("proxy", "proxy2", "proxy3", "proxy4")


def service_exec(service: str, *argv: str) -> str:
    ids = subprocess.run(["docker", "ps", "-q", "--filter",
                          f"label=com.docker.compose.project={model.PROJECT}", "--filter",
                          f"label=com.docker.compose.service={service}"],
                         capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert len(ids) == 1, (service, ids)
    done = subprocess.run(["docker", "exec", ids[0], *argv], capture_output=True, text=True,
                          timeout=60, check=True)
    return done.stdout


def test_four_proxies_share_the_load_and_the_proxy_tier_sums_them(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    with cli_env(tmp_path_factory.mktemp("proxies")) as env:
        done = tierbench(env, "run", str(EXPERIMENT), timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        run_dir = next((Path(env["TIERBENCH_RESULTS"]) / "proxies-short").iterdir())
        [row] = summary_rows(run_dir)
        assert not row["error"] and float(row["tps"]) > 0, row
        # every proxy and every web server served requests (their own access logs)
        served = {p: len(service_exec(p, "cat", "/var/log/apache2/access.log").splitlines())
                  for p in PROXIES}
        assert min(served.values()) > 100, served
        # one wrk thread of 2 connections per proxy: the same share within a factor 2
        assert max(served.values()) < 2 * min(served.values()), served
        for web in ("web", "web2", "web3"):
            lines = service_exec(web, "cat", "/var/log/apache2/access.log").splitlines()
            assert len(lines) > 10, (web, len(lines))
        # each proxy has its own cache, and the row's hits and misses are their sum
        counted = 0
        for p in PROXIES:
            log = service_exec(p, "cat", "/var/log/apache2/cache.log").splitlines()
            assert any("hit" in line for line in log), p
            counted += len(log)
        hits, misses = int(row["proxy_cache_hits"]), int(row["proxy_cache_misses"])
        assert 0 < hits + misses <= counted and float(row["proxy_hit_ratio"]) > 0.5, row
        # the proxy tier's CPU in every sample is the sum of its four proxies', each of which
        # grew over the point
        [point] = (run_dir / "points").iterdir()
        samples = [json.loads(line) for line in (point / "samples.jsonl").read_text().splitlines()
                   if line.strip() and "cpu" in json.loads(line)]
        for s in samples:
            tier = s["cpu"]["proxy"]
            assert set(tier["parts"]) == set(PROXIES)
            assert tier["usage_s"] == pytest.approx(sum(tier["parts"].values()), abs=1e-6)
        first, last = samples[0]["cpu"]["proxy"]["parts"], samples[-1]["cpu"]["proxy"]["parts"]
        for p in PROXIES:
            assert last[p] - first[p] > 0.01, (p, first, last)
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["points"]["p001"]["targets"] == [f"http://{p}" for p in PROXIES]
