"""The application and database tiers behind the web tier (compose/app-db.yml), as the web kind
uses them: the database's own counters read every second, the write check, the space and
memory the seeded data set takes, the server settings for the manifest, and a stopped tier
started again.

The database's counters come from pg_stat_statements (the statements of the application's role
`tierbench` in the database `tierbench`), read through one psql session that stays open in the
db container and is connected to the `postgres` database, so that reading them costs one query a
second and is not counted. A statement's calls, rows and blocks are added to shared memory when
it ends, so the counters are exact at the end of each query (pg_stat_database, which a busy
backend publishes at most once a second and an idle one 10 s late, is not). Before the load the
web kind reads them once the application tier serves no request of the previous point
(`wait_until_app_idle`): after the database was stopped and started again, a request the load
generator had given up on can connect to the new server and insert its row seconds later, after
the writes table was emptied for the next point (a CI run counted 4 rows more than the write
check allows in the point after a database restart); after the load, once it is idle again.

Every command reaches the containers through the placer (`docker --context NODE` on a
cluster: its node's transport), so the tiers run on this host or on cluster nodes.
"""

from __future__ import annotations

import os
import select
import threading
import time
from typing import Any

from tierbench.placement import model
from tierbench import space
from tierbench.placement.placer import Placer
from tierbench.transport import DEVNULL, PIPE, DidNotFinish, Process, TransportError

DATABASE = "tierbench"
ROLE = "tierbench"  # the application tier's role (images/db/db-start.sh)
# Summed over the application role's statements in the tierbench database: every statement
# (dyn.php sends no BEGIN: each is a transaction of its own), rows SELECTs returned, rows
# INSERT, UPDATE and DELETE changed, shared blocks read from storage.
STAT_FIELDS = ("statements", "rows_read", "rows_written", "blocks_read")
STATS_QUERY = ("SELECT coalesce(sum(s.calls), 0), "
               "coalesce(sum(s.rows) FILTER (WHERE s.query ~* '^\\s*select\\M'), 0), "
               "coalesce(sum(s.rows) FILTER (WHERE s.query ~* "
               "'^\\s*(insert|update|delete)\\M'), 0), "
               "coalesce(sum(s.shared_blks_read), 0) "
               "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
               f"JOIN pg_roles r ON r.oid = s.userid WHERE d.datname = '{DATABASE}' "
               f"AND r.rolname = '{ROLE}';\n")
# What PostgreSQL runs with (read back from the server, for the manifest).
SETTINGS = ("server_version", "shared_buffers", "max_connections", "synchronous_commit",
            "fsync", "wal_level", "max_wal_size", "work_mem", "effective_cache_size",
            "autovacuum")
DB_BASE_BYTES = 64 << 20  # an empty cluster: catalogs, the first WAL segments
WAL_BYTES = 256 << 20  # max_wal_size (compose/app-db.yml's DB_MAX_WAL_SIZE default)
ROW_OVERHEAD = 100  # tuple header, line pointer, varlena header, primary-key index entry
HEALTHY_WAIT_S = 120.0


def psql_argv(database: str) -> list[str]:
    """psql, run in the db container as the postgres user (peer authentication on the local
    socket): unaligned, tuples only, no .psqlrc."""
    return ["psql", "-X", "-q", "-A", "-t", "-d", database]


def sql(where: Placer, container: model.Container, statement: str,
        timeout: float = 60) -> str | None:
    """One statement in the tierbench database; its output, or None when the database does
    not answer."""
    try:
        done = where.exec(container, [*psql_argv(DATABASE), "-c", statement], user="postgres",
                          timeout=timeout)
    except DidNotFinish:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


APP_PORT = 9000  # PHP-FPM's FastCGI port (images/app/conf/pool.conf)
APP_IDLE_WAIT_S = 30.0
TCP_ESTABLISHED = "01"


def requests_in(proc_net_tcp: str, port: int = APP_PORT) -> int:
    """Established TCP connections to local `port` in /proc/net/tcp(6) text: the FastCGI
    requests the application tier is serving or has queued (the web tier opens one connection
    per request)."""
    count = 0
    for line in proc_net_tcp.splitlines():
        fields = line.split()
        if len(fields) < 4 or ":" not in fields[1]:
            continue  # a header line
        local_port = fields[1].rsplit(":", 1)[1]
        try:
            if int(local_port, 16) == port and fields[3] == TCP_ESTABLISHED:
                count += 1
        except ValueError:
            continue
    return count


def wait_until_app_idle(where: Placer, app: model.Container,
                        limit_s: float = APP_IDLE_WAIT_S) -> tuple[int, float]:
    """Wait until the application tier serves no request (none at two readings 0.5 s apart),
    at most `limit_s`: requests of the previous point may still be in it (after a database
    restart, its last requests connect to the new server seconds later) and would insert their
    rows after the writes table was emptied for the next point. Returns the requests still in
    it when the wait ended (0: idle; -1: its connections could not be read) and the seconds
    waited."""
    began = time.monotonic()
    deadline = began + limit_s
    idle_readings, busy = 0, -1
    while True:
        try:  # /proc/net/tcp6 is missing where IPv6 is off: cat fails, tcp is still read
            out = where.exec(app, ["cat", "/proc/net/tcp", "/proc/net/tcp6"],
                             timeout=30).stdout
            busy = requests_in(out) if "local_address" in out else -1
        except DidNotFinish:
            busy = -1
        idle_readings = idle_readings + 1 if busy == 0 else 0
        if idle_readings == 2 or busy < 0 or time.monotonic() >= deadline:
            return (0 if idle_readings == 2 else busy), time.monotonic() - began
        time.sleep(0.5)


class PgStats:
    """The application role's pg_stat_statements counters (STAT_FIELDS) as a sampler probe: read()
    returns them ({} when the database does not answer within `timeout`), through one psql
    session kept open in the db container and started again after a failure. A new session's
    first answer may take up to `open_timeout` (on a cluster, `docker --context` opens an SSH
    connection to the node first)."""

    def __init__(self, where: Placer, container: model.Container, timeout: float = 0.8,
                 open_timeout: float = 10.0) -> None:
        self.container, self.timeout, self.open_timeout = container, timeout, open_timeout
        self.where = where
        self.proc: Process | None = None
        self.buffer = b""
        self.answered = False  # whether the open session has answered once
        # the sampling thread and a mark taken on the kind's thread may read at once; one
        # session answers one query at a time
        self.lock = threading.Lock()

    def __call__(self) -> dict[str, int]:
        return self.read()

    def read(self) -> dict[str, int]:
        """The counters now, or {} when the database does not answer in time. A session that
        ended (psql lost its server: the database restarted) is replaced at once, once."""
        with self.lock:
            return self._read()

    def _read(self) -> dict[str, int]:
        for attempt in (1, 2):
            try:
                return self.query()
            except TimeoutError:
                self.close()
                return {}
            except (OSError, ValueError):
                self.close()
                if attempt == 2:
                    return {}
        return {}

    def query(self) -> dict[str, int]:
        """One reading through the session (opened first when there is none)."""
        if self.proc is None or self.proc.poll() is not None:
            self.open()
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(STATS_QUERY.encode())
        self.proc.stdin.flush()
        line = self.line(self.timeout if self.answered else self.open_timeout)
        values = [int(v) for v in line.split("|")]
        if len(values) != len(STAT_FIELDS):
            raise ValueError(line)
        self.answered = True
        return dict(zip(STAT_FIELDS, values))

    def open(self) -> None:
        """Start the psql session (its own session: a Ctrl-C reaches tierbench, not psql)."""
        self.close()
        self.buffer, self.answered = b"", False
        self.proc = self.where.popen(self.container, psql_argv("postgres"), user="postgres",
                                     interactive=True, stdin=PIPE,
                                     stdout=PIPE, stderr=DEVNULL,
                                     start_new_session=True)

    def line(self, timeout: float) -> str:
        """The next line psql prints, within `timeout` seconds."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError("the database did not answer")
            chunk = os.read(fd, 4096)
            if not chunk:
                raise OSError("psql ended")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode().strip()

    def close(self) -> None:
        """End the psql session, if one is open."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(timeout=10)
            for pipe in (self.proc.stdin, self.proc.stdout):
                if pipe is not None:
                    pipe.close()
            self.proc = None


def counted_between(a: dict[str, int], b: dict[str, int]) -> dict[str, int] | None:
    """What the database counted between two readings of the probe; None when either is
    missing (the database did not answer) or the counters went down (it was started again:
    pg_stat_statements starts from zero, images/db/db-start.sh)."""
    if not a or not b or any(name not in a or name not in b for name in STAT_FIELDS):
        return None
    delta = {name: b[name] - a[name] for name in STAT_FIELDS}
    return None if any(v < 0 for v in delta.values()) else delta


def db_figures(first: dict, last: dict) -> dict[str, float]:
    """The database's figures between two samples: transactions (statements) per second,
    rows read and written, blocks read from storage; {} when the database did not answer at
    either sample or was started again between them."""
    span = last["t"] - first["t"]
    delta = counted_between((first.get("probes") or {}).get("db") or {},
                            (last.get("probes") or {}).get("db") or {})
    if delta is None or span <= 0:
        return {}
    return {"db_tps": delta["statements"] / span, "db_rows_read": delta["rows_read"],
            "db_rows_written": delta["rows_written"], "db_blocks_read": delta["blocks_read"]}


def per_dynamic_request(before: dict[str, int], after: dict[str, int],
                        answered: int) -> dict[str, float]:
    """Rows read and statements per dynamic request answered, over a whole load: the counters
    read before it and after it (each exact: nothing of the application tier running) against
    the dynamic requests the load generator had answered; {} without both readings or without
    an answered request."""
    delta = counted_between(before, after)
    if delta is None or answered <= 0:
        return {}
    return {"db_rows_read_per_dyn": delta["rows_read"] / answered,
            "db_statements_per_dyn": delta["statements"] / answered}


def write_check(writes_ok: float | None, rows: int | None, in_flight: int) -> str:
    """"ok" when the rows the write requests inserted are the successful write requests (up to
    `in_flight` more: requests the engine stopped waiting for, which the database still
    completed), else one sentence saying what differs."""
    if writes_ok is None:
        return "not checked: the load generator did not count its write requests"
    if rows is None:
        return "not checked: the database did not answer after the point"
    if rows < writes_ok:
        return (f"{writes_ok - rows} of {writes_ok} successful write requests left no row in "
                "the database")
    if rows > writes_ok + in_flight:
        return (f"{rows} rows were written for {writes_ok} successful write requests, more "
                f"than the {in_flight} that can have been in flight when the load stopped")
    return "ok"


def empty_writes(where: Placer, db: model.Container) -> bool:
    """Empty the writes table before a point (its rows are counted after it)."""
    return sql(where, db, "TRUNCATE writes") is not None


def rows_written(where: Placer, db: model.Container, settle_s: float = 5.0) -> int | None:
    """Rows in the writes table once no query of the application tier is running any more
    (at most `settle_s` of waiting); None when the database does not answer."""
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline:
        busy = sql(where, db, "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                       f"'{DATABASE}' AND state = 'active' AND pid <> pg_backend_pid()", 30)
        if busy is None:
            return None
        if busy == "0":
            break
        time.sleep(0.2)
    count = sql(where, db, "SELECT count(*) FROM writes")
    return int(count) if count is not None and count.isdigit() else None


def server_settings(where: Placer, db: model.Container) -> dict[str, Any]:
    """PostgreSQL's settings as the server reports them, and the seeded data set."""
    names = ", ".join(f"'{n}'" for n in SETTINGS)
    out: dict[str, Any] = {}
    text = sql(where, db, f"SELECT name, current_setting(name) FROM pg_settings WHERE name IN "
                   f"({names}) ORDER BY name")
    for line in (text or "").splitlines():
        name, _, value = line.partition("|")
        out[name] = value
    seed = sql(where, db, "SELECT rows, row_bytes, seed, pg_total_relation_size('items') "
                   "FROM seed_info")
    if seed:
        rows, row_bytes, seed_, size = seed.split("|")
        out["seeded"] = {"rows": int(rows), "row_bytes": int(row_bytes), "seed": int(seed_),
                         "items_bytes": int(size)}
    return out


def seed_bytes(rows: int, row_bytes: int) -> int:
    """Disk the database takes for a data set: the cluster, the rows with their index, the WAL
    of loading them once, and WAL up to max_wal_size."""
    return DB_BASE_BYTES + 2 * rows * (row_bytes + ROW_OVERHEAD) + WAL_BYTES


def needs(what: str, rows: int, row_bytes: int, shared_buffers: int) -> list[space.Need]:
    """The database's volume under Docker's data folder, its shared buffers in memory (on a
    cluster: on the db role's nodes)."""
    return [space.on_disk(f"the database of {what} ({rows:,} rows x {row_bytes} bytes)",
                          seed_bytes(rows, row_bytes), space.docker_root(),
                          "Docker's data folder", "lower stack.db.rows or stack.db.row_bytes, "
                          "or free space there", role="db"),
            space.in_memory("the database's shared buffers", shared_buffers,
                            "lower stack.db.shared_buffers", role="db")]


def start_again(where: Placer, container: model.Container) -> None:
    """Start a stopped container of the stack again (on its node) and wait until it is
    healthy."""
    try:
        done = where.start(container, timeout=120)
        why = (done.stderr.strip().splitlines() or ["it is gone"])[-1]
    except TransportError as exc:  # docker is missing, or did not finish
        done, why = None, str(exc)
    if done is None or done.returncode != 0:
        raise model.StackError(f"the {container.service} tier's container {container.name} "
                                 f"could not be started ({why}): run `tierbench clean` and "
                                 "start the run again")
    deadline = time.monotonic() + HEALTHY_WAIT_S
    while time.monotonic() < deadline:
        try:
            health = where.docker(container, "inspect", "-f", "{{.State.Health.Status}}",
                                  container.id, timeout=30).stdout.strip()
        except TransportError:
            health = ""
        if health == "healthy":
            return
        time.sleep(1)
    raise model.StackError(f"the {container.service} tier did not become healthy within "
                             f"{HEALTHY_WAIT_S:.0f} s of starting again: see "
                             f"`{' '.join(where.transport(container).docker('logs'))} "
                             f"{container.name}`")
