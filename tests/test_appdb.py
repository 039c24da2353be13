"""The application and database tiers' pieces without Docker: the write check, the database's
figures over a window, the sampler probe's psql session (a real process speaking psql's output
format), the space a seed takes, and the summary columns and stack settings of dynamic
experiments."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tierbench.kinds import registry
from tierbench.kinds.web import appdb
from tierbench.measure.sampler import Sampler
from tierbench.kinds.web import services
from tierbench.placement import local, model, placer
from tierbench import space
from tierbench.transport import Transport

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("writes_ok, rows, in_flight, verdict", [
    (100, 100, 8, "ok"),
    (100, 108, 8, "ok"),  # requests the engine stopped waiting for still inserted their row
    (100, 97, 8, "3 of 100 successful write requests left no row in the database"),
    (100, 109, 8, "109 rows were written for 100 successful write requests, more than the 8"),
    (100, None, 8, "not checked: the database did not answer after the point"),
    (None, 100, 8, "not checked: the load generator did not count its write requests"),
])
def test_write_check(writes_ok: int | None, rows: int | None, in_flight: int,
                     verdict: str) -> None:
    assert appdb.write_check(writes_ok, rows, in_flight).startswith(verdict)


def counters(**values: int) -> dict[str, int]:
    return {name: values.get(name, 0) for name in appdb.STAT_FIELDS}


def test_db_figures_over_the_window_by_hand() -> None:
    first = {"t": 100.0, "probes": {"db": counters(statements=1005, rows_read=50,
                                                   rows_written=11, blocks_read=7)}}
    last = {"t": 104.0, "probes": {"db": counters(statements=1409, rows_read=450,
                                                  rows_written=217, blocks_read=9)}}
    assert appdb.db_figures(first, last) == {"db_tps": 101.0, "db_rows_read": 400,
                                             "db_rows_written": 206, "db_blocks_read": 2}
    # the database was down at one end, or started again between them (its counters start
    # from zero): no figures, not zeros nor negative ones
    assert appdb.db_figures(first, {"t": 104.0, "probes": {"db": {}}}) == {}
    assert appdb.db_figures({"t": 1.0}, last) == {}
    restarted = {"t": 104.0, "probes": {"db": counters(statements=300, rows_read=150,
                                                       rows_written=0, blocks_read=9)}}
    assert appdb.db_figures(first, restarted) == {}


def test_rows_read_and_statements_per_dynamic_request_over_the_load() -> None:
    before = counters(statements=10, rows_read=3, rows_written=0, blocks_read=1)
    after = counters(statements=10 + 2 * 5000 + 4, rows_read=3 + 5002, rows_written=0,
                     blocks_read=1)
    got = appdb.per_dynamic_request(before, after, 5000)
    # two requests the engine gave up on still ran their query (and PHP's RESET ALL)
    assert got == {"db_rows_read_per_dyn": pytest.approx(1.0004),
                   "db_statements_per_dyn": pytest.approx(2.0008)}
    assert appdb.per_dynamic_request({}, after, 5000) == {}
    assert appdb.per_dynamic_request(before, after, 0) == {}
    assert appdb.per_dynamic_request(after, before, 5000) == {}  # started again in between


def test_the_probe_reads_the_application_roles_statements_only() -> None:
    query = appdb.STATS_QUERY
    assert query.endswith(";\n") and query.count("\n") == 1  # one line for the psql session
    assert "FROM pg_stat_statements" in query and "pg_stat_database" not in query
    assert "d.datname = 'tierbench'" in query and "r.rolname = 'tierbench'" in query
    # PostgreSQL reads \s and \M as regular-expression escapes (standard strings)
    assert r"~* '^\s*select\M'" in query


def test_the_db_image_loads_pg_stat_statements_where_the_probe_reads_it() -> None:
    start = (ROOT / "images" / "db" / "db-start.sh").read_text()
    assert "-c shared_preload_libraries=pg_stat_statements" in start
    # not saved at shutdown: a restart shows as counters that went down (counted_between)
    assert "-c pg_stat_statements.save=off" in start
    # the view, in the database the probe connects to, made before the server starts
    made = start.index('postgres --single -D "$PGDATA" postgres >/dev/null')
    assert start.index("CREATE EXTENSION IF NOT EXISTS pg_stat_statements;") > made
    assert start.index("exec postgres") > made


FAKE_PSQL = """
n=0
[ -n "$SLOW_START" ] && sleep "$SLOW_START"
while read -r query; do
  case "$query" in *pg_stat_statements*) ;; *) echo "unexpected: $query"; continue;; esac
  n=$((n + 1))
  [ "$n" = "$SLOW_AT" ] && sleep 2
  echo "$((100 * n))|$n|2|3"
  [ "$n" = "$QUIT_AT" ] && exit 2
done
"""


def fake_psql(monkeypatch: pytest.MonkeyPatch, *sessions: dict[str, str]) -> list[int]:
    """psql stands in as a shell loop printing psql's unaligned rows (the nth process started
    with the nth settings, later ones with none); returns one entry per process started."""
    starts: list[int] = []

    def argv(database: str) -> list[str]:
        assert database == "postgres"  # never the counted database
        env = sessions[len(starts)] if len(starts) < len(sessions) else {}
        starts.append(1)
        return ["sh", "-c", "".join(f"{k}={v}\n" for k, v in env.items()) + FAKE_PSQL]

    monkeypatch.setattr(appdb, "psql_argv", argv)
    return starts


DB = model.Container("db", "id", "tierbench-db-1", 1, "img", "sha256:x", "1")


class Here(local.LocalPlacer):
    """Runs the db container's psql session on this host as it is (the fake psql is a shell
    loop), checking it is asked for as the postgres user with its input open."""

    def popen(self, container: model.Container, argv: list[str], *,
              env: dict[str, str] | None = None, user: str | None = None,
              interactive: bool = False, **kwargs: Any) -> subprocess.Popen:
        assert container is DB and user == "postgres" and interactive
        return subprocess.Popen(argv, **kwargs)


def test_the_probe_keeps_one_session_and_reads_every_counter(
        monkeypatch: pytest.MonkeyPatch) -> None:
    starts = fake_psql(monkeypatch)
    probe = appdb.PgStats(Here(), DB)
    try:
        first, second = probe(), probe()
    finally:
        probe.close()
    assert first == dict(zip(appdb.STAT_FIELDS, [100, 1, 2, 3]))
    assert second["statements"] == 200 and second["rows_read"] == 2
    assert len(starts) == 1  # one process for every reading


def test_the_sampling_thread_and_a_mark_read_the_probe_at_once_each_getting_its_answer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    starts = fake_psql(monkeypatch)
    probe = appdb.PgStats(Here(), DB, timeout=5)
    got: list[dict] = []

    def reads() -> None:
        for _ in range(25):
            got.append(probe())

    threads = [threading.Thread(target=reads) for _ in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        probe.close()
    # every query answered once, in one session: the nth answer is the nth query's
    assert sorted(r.get("statements", 0) for r in got) == [100 * n for n in range(1, 51)]
    assert len(starts) == 1


def test_a_database_that_does_not_answer_gives_no_counters_then_a_new_session(
        monkeypatch: pytest.MonkeyPatch) -> None:
    starts = fake_psql(monkeypatch, {"SLOW_AT": "2"}, {"QUIT_AT": "2"})
    probe = appdb.PgStats(Here(), DB, timeout=0.5)
    try:
        assert probe()["statements"] == 100
        t0 = time.monotonic()
        assert probe() == {}  # the second answer comes too late
        assert time.monotonic() - t0 < 1.5
        assert probe()["statements"] == 100  # a new session counts from its start
        assert probe()["statements"] == 200  # ... and then ends (psql lost its server)
        time.sleep(0.2)
        assert probe()["statements"] == 100  # the next reading opens a third one at once
        assert len(starts) == 3
    finally:
        probe.close()
    assert probe.proc is None


def test_a_new_session_may_take_longer_to_answer_first_then_the_timeout_holds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a cluster `docker --context` connects to the node before psql starts: the first
    answer of a session gets open_timeout, the later ones the sampler's timeout."""
    starts = fake_psql(monkeypatch, {"SLOW_START": "1", "SLOW_AT": "2"})
    probe = appdb.PgStats(Here(), DB, timeout=0.3, open_timeout=5)
    try:
        assert probe()["statements"] == 100  # after 1 s: longer than timeout, within open
        assert probe() == {}  # a later answer 2 s late is not waited for
        assert len(starts) == 1
    finally:
        probe.close()
    starts = fake_psql(monkeypatch, {"SLOW_START": "2"})
    probe = appdb.PgStats(Here(), DB, timeout=0.3, open_timeout=0.5)
    try:
        t0 = time.monotonic()
        assert probe() == {}  # nor a first answer later than open_timeout
        assert time.monotonic() - t0 < 1.5
    finally:
        probe.close()


def test_commands_reach_the_db_container_through_its_nodes_engine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """psql runs in the db container through the placer: through the Docker context of the
    node the container is on (this host's engine when it has none)."""
    class OnNode(local.LocalPlacer):
        def transport(self, container: model.Container) -> Transport:
            return Transport("node4", ("ssh",), "tierbench-node4")

    seen: list[list[str]] = []
    monkeypatch.setattr(placer, "run_argv", lambda argv, **kw: seen.append(argv) or
                        subprocess.CompletedProcess(argv, 0, "1\n", ""))
    assert appdb.sql(OnNode(), DB, "SELECT 1") == "1"
    assert seen[-1] == ["docker", "--context", "tierbench-node4", "exec", "-u", "postgres", "id",
                        "psql", "-X", "-q", "-A", "-t", "-d", "tierbench", "-c", "SELECT 1"]
    assert appdb.sql(local.LocalPlacer(), DB, "SELECT 1") == "1"
    assert seen[-1][:5] == ["docker", "exec", "-u", "postgres", "id"]


def test_the_sampler_records_probes_beside_the_counters(tmp_path: Path) -> None:
    readings = iter(range(100))
    sampler = Sampler(tmp_path / "samples.jsonl", {}, {}, interval=0.05,
                      probes={"db": lambda: {"statements": next(readings)}})
    sampler.start()
    time.sleep(0.2)
    samples = sampler.stop()
    values = [s["probes"]["db"]["statements"] for s in samples]
    assert len(values) >= 3 and values == sorted(values)
    assert (tmp_path / "samples.jsonl").read_text().count('"probes"') == len(samples)


def test_a_seed_needs_its_rows_twice_plus_the_wal_and_its_buffers_in_memory() -> None:
    rows, row_bytes = 1000, 924
    assert appdb.seed_bytes(rows, row_bytes) == (64 << 20) + 2 * 1000 * 1024 + (256 << 20)
    disk, memory = appdb.needs("exp.yml", rows, row_bytes, 128 << 20)
    assert disk.bytes == appdb.seed_bytes(rows, row_bytes) and "Docker's data folder" in disk.where
    assert memory.where == space.MEMORY and memory.bytes == 128 << 20
    assert disk.role == memory.role == "db"  # on a cluster: checked on the db role's nodes


def test_dynamic_experiments_bring_up_the_tiers_and_name_their_columns() -> None:
    exp = registry.load_experiment("dc-dynamic")
    kind = registry.kind("web")
    [settings] = {kind.deployment_key(exp, p) for p in kind.points(exp, exp.seed)}
    settings = dict(settings)
    assert services.has_app_db(settings)
    assert {k: settings[k] for k in services.APP_DB_ENV} == {
        "db_rows": 100000, "db_row_bytes": 256, "db_seed": 20, "db_shared_buffers": "128MB",
        "app_workers": 16}
    files = services.compose_files(settings)
    assert str(ROOT / "compose" / "app-db.yml") in files
    env = services.stack_env(settings, [])
    assert (env["DB_ROWS"], env["DB_SEED"], env["APP_WORKERS"]) == ("100000", "20", "16")
    columns = [c.name for c in kind.columns(exp)]
    for name in ("content", "dynamic_share", "query", "cpu_s_app", "cpu_s_db", "db_tps",
                 "writes_ok", "rows_written", "write_check"):
        assert name in columns
    writes = next(p for p in kind.points(exp, exp.seed) if p["trace"]["name"] == "zipf-writes-20")
    ident = kind.identity(exp, writes)
    assert (ident["content"], ident["dynamic_share"], ident["query"]) == ("mixed", 0.2, "write")
    static = next(p for p in kind.points(exp, exp.seed) if p["trace"]["name"] == "static-4k")
    assert kind.identity(exp, static)["content"] == "static"
    # a static experiment has none of it
    quick = registry.load_experiment("quick")
    assert not any(services.has_app_db(dict(kind.deployment_key(quick, p)))
                   for p in kind.points(quick, quick.seed))
    assert "cpu_s_app" not in [c.name for c in kind.columns(quick)]


def test_cpu_modes_give_each_point_its_platform() -> None:
    exp = registry.load_experiment("dc-cpus")
    kind = registry.kind("web")
    seen = {(p.mode, kind.identity(exp, p)["cpus"], kind.identity(exp, p)["cpu_time"])
            for p in kind.points(exp, exp.seed)}
    assert seen == {("webapp-1cpu", 1, 1.0), ("webapp-2cpus", 2, 2.0),
                    ("webapp-2cpus-half", 2, 1.0)}


PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:2328 00000000:0000 0A 00000000:00000000 00:00000000 00000000    33        0 1 1
   1: 1E0212C6:2328 1F0212C6:A3B2 01 00000000:00000000 00:00000000 00000000    33        0 2 1
   2: 1E0212C6:2328 1F0212C6:A3B4 01 00000000:00000000 00:00000000 00000000     0        0 0 1
   3: 1E0212C6:2328 1F0212C6:A3B6 06 00000000:00000000 03:00000000 00000000     0        0 0 3
   4: 1E0212C6:C350 1E0212C6:1538 01 00000000:00000000 00:00000000 00000000    33        0 3 1
  sl  local_address                         remote_address                        st
   0: 0000000000000000FFFF00000100007F:2328 0000000000000000FFFF00000100007F:B0C2 01 0 0
"""


def test_requests_in_the_application_tier_are_its_established_fastcgi_connections() -> None:
    # the listening socket (0A), a TIME_WAIT (06) and its own connection to the database
    # (local port 0xC350, remote 5432) are not requests; a queued one (rows 2 and IPv6) is
    assert appdb.requests_in(PROC_NET_TCP) == 3
    assert appdb.requests_in(PROC_NET_TCP, port=5432) == 0
    assert appdb.requests_in("") == 0
