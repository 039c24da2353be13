"""The caching proxy with a cache smaller than the working set, on the real stack through
`tierbench run` (tests/data/experiments/proxy-cache-full.yml with PROXY_CACHE_SIZE=16m: about
50 MiB of files under Zipf 0.5): the cache stops storing at its limit (proxy-cache-guard) and
never writes into a full tmpfs, where mod_cache_disk's failed header write crashed the Apache
child and closed its clients' connections (wrk's read errors in DC-alpha-cache); every request
answered, and what was stored first still served from the cache.

Needs root, Docker with Compose v2 and the images (`make test` provides them)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from stack_env import cli_env, summary_rows, tierbench

from tierbench.placement import model

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = ROOT / "tests" / "data" / "experiments" / "proxy-cache-full.yml"
CACHE = "/var/cache/apache2/mod_cache_disk"
TMPFS_KIB = 16 * 1024


def proxy_container() -> str:
    ids = subprocess.run(["docker", "ps", "-q", "--filter",
                          f"label=com.docker.compose.project={model.PROJECT}", "--filter",
                          "label=com.docker.compose.service=proxy"],
                         capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert len(ids) == 1, ids
    return ids[0]


def test_a_full_cache_stops_storing_and_every_request_is_answered(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    with cli_env(tmp_path_factory.mktemp("proxy-cache"), PROXY_CACHE_SIZE="16m") as env:
        done = tierbench(env, "run", str(EXPERIMENT), timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        run_dir = next((Path(env["TIERBENCH_RESULTS"]) / "proxy-cache-full").iterdir())
        [row] = summary_rows(run_dir)
        proxy = proxy_container()
        log = subprocess.run(["docker", "logs", proxy], capture_output=True, text=True,
                             timeout=60, check=True)
        log_lines = (log.stdout + log.stderr).splitlines()
        # every request answered: no connection closed by a crashed proxy child
        assert not row["error"] and int(row["errors"]) == 0 and float(row["tps"]) > 0, row
        failed = [line for line in log_lines
                  if "No space left on device" in line or "Segmentation fault" in line]
        assert not failed, failed[:5]
        # the cache was filled to its limit (the guard stopped storing) on a tmpfs of the size
        # asked for, which never filled (no write failed for want of space, above)
        stopped = [line for line in log_lines if "new responses are not stored" in line]
        assert stopped, log_lines[-20:]
        df = subprocess.run(["docker", "exec", proxy, "df", "-k", "--output=size", CACHE],
                            capture_output=True, text=True, timeout=60, check=True)
        assert int(df.stdout.split()[-1]) == TMPFS_KIB, df.stdout
        # what was stored before the limit is still served from the cache
        assert int(row["proxy_cache_hits"]) > 0 and int(row["proxy_cache_misses"]) > 0, row
