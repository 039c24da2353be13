"""Who may connect to what, without Docker: the addresses PHP-FPM, PostgreSQL and GlusterFS admit
for a cluster file (cluster.example.yml and the lab's, as setup/lab.sh writes it) and on one
host (the Compose files as shipped, read with `docker compose config`, which needs no engine);
the pg_hba.conf the db image writes from them (its own script, run here), PHP-FPM's pool and
start script, the file server's glusterd.vol and auth.allow (its script against stand-ins for
glusterd and gluster); the database password's file; and no password in any image or compose
file."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from tierbench.kinds import registry
from tierbench.kinds.fs import roles as fs_roles
from tierbench.kinds.web import roles as web_roles
from tierbench.placement import access, clusterfile, compose, hostnet, model

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "images"
# the services that admit only their peers: the web stack's and the file server's
ADMISSIONS = (*web_roles.ADMISSIONS, *fs_roles.ADMISSIONS)


def lab_file(tmp_path: Path, n: int) -> clusterfile.Cluster:
    """The cluster file `setup/lab.sh up N` writes, made by its own write_cluster function."""
    script = ROOT / "setup" / "lab.sh"
    functions = subprocess.run(
        ["sed", "-n", "/^addr() /p; /^write_cluster() /,/^}/p", str(script)],
        capture_output=True, text=True, check=True).stdout
    assert "write_cluster()" in functions and "addr()" in functions
    (tmp_path / "ssh_config").write_text("")  # the file names it; make lab-up writes it
    subprocess.run(["bash", "-c", f"{functions}\nPREFIX=198.18.16 LAB={tmp_path}\n"
                    f"write_cluster {n}"], check=True, timeout=30)
    return clusterfile.load_cluster(tmp_path / "cluster.yml", registry.roles())


def test_the_example_rack_admits_the_nodes_whose_roles_talk_to_each_service() -> None:
    rack = clusterfile.load_cluster(ROOT / "cluster.example.yml", registry.roles())
    # web1 runs the web tier and the application tier; store1 the database and its seed job;
    # client1 the file-server client. Only the first data-plane address of each node counts
    # (store1's second port, 10.20.1.4, is never admitted).
    assert access.cluster_admitted(rack, ADMISSIONS) == {
        "APP_CLIENTS": ["10.20.0.3"], "APP2_CLIENTS": ["10.20.0.3"], "APP3_CLIENTS": ["10.20.0.3"],
        "DB_CLIENTS": ["10.20.0.3", "10.20.0.4"],
        "FS_CLIENTS": ["10.20.0.1"],
    }


@pytest.mark.parametrize("n, want", [
    (2, {"APP_CLIENTS": ["198.18.16.12"], "APP2_CLIENTS": ["198.18.16.12"],
         "APP3_CLIENTS": ["198.18.16.12"], "DB_CLIENTS": ["198.18.16.12"],
         "FS_CLIENTS": ["198.18.16.11"]}),
    (4, {"APP_CLIENTS": ["198.18.16.13"], "APP2_CLIENTS": ["198.18.16.13"],
         "APP3_CLIENTS": ["198.18.16.13"], "DB_CLIENTS": ["198.18.16.13", "198.18.16.14"],
         "FS_CLIENTS": ["198.18.16.11", "198.18.16.13"]}),
])
def test_the_labs_cluster_files_admit_their_nodes(tmp_path: Path, n: int, want: dict) -> None:
    lab = lab_file(tmp_path, n)
    assert access.cluster_admitted(lab, ADMISSIONS) == want
    # the loadgen node (node1) is admitted by nothing but the file server: it talks to the proxy
    assert "198.18.16.11" not in want["APP_CLIENTS"] + want["DB_CLIENTS"]


def test_several_web_nodes_are_all_admitted_by_the_application_tier(tmp_path: Path) -> None:
    lab = lab_file(tmp_path, 4)
    data = lab.model_dump(exclude={"path"})
    data["roles"]["web"] = ["node3", "node4"]
    data["roles"]["app"] = "node2"
    several = clusterfile.parse_cluster(data, registry.roles(), "c.yml")
    got = access.cluster_admitted(several, ADMISSIONS)
    assert got["APP_CLIENTS"] == ["198.18.16.13", "198.18.16.14"]
    assert got["DB_CLIENTS"] == ["198.18.16.12", "198.18.16.14"]


def test_an_unplaced_role_admits_nobody() -> None:
    one = clusterfile.parse_cluster({"version": 1, "nodes": [
        {"name": "n1", "address": "10.0.0.1", "interfaces": [{"name": "e0",
                                                               "address": "10.0.0.1/24"}]}],
        "roles": {"loadgen": "n1", "proxy": "n1", "web": "n1"}}, registry.roles(), "c.yml")
    got = access.cluster_admitted(one, ADMISSIONS)
    assert got == {"APP_CLIENTS": ["10.0.0.1"], "APP2_CLIENTS": ["10.0.0.1"],
                   "APP3_CLIENTS": ["10.0.0.1"], "DB_CLIENTS": [], "FS_CLIENTS": []}


def test_with_the_services_nodes_a_service_admits_only_its_clients_nodes(
        tmp_path: Path) -> None:
    """Of a role listing several nodes, only those running one of the admission's clients."""
    lab = lab_file(tmp_path, 4)
    data = lab.model_dump(exclude={"path"})
    data["roles"]["web"] = ["node3", "node4"]
    several = clusterfile.parse_cluster(data, registry.roles(), "c.yml")
    fake = (access.Admission("s2", "S2_CLIENTS", ("c2",), ("web",), "its list"),
            access.Admission("s", "S_CLIENTS", ("c", "c2"), ("web",), "its list"))
    got = access.cluster_admitted(several, fake, {"c": ["node3"], "c2": ["node4"]})
    assert got == {"S2_CLIENTS": ["198.18.16.14"], "S_CLIENTS": ["198.18.16.13", "198.18.16.14"]}
    # a client placed off the roles' nodes is not admitted; none placed: nobody
    assert access.cluster_admitted(several, fake, {"c2": ["node1"]}) == {
        "S2_CLIENTS": [], "S_CLIENTS": []}


def host_config(*files: str) -> dict:
    argv = ["docker", "compose", *(a for f in files for a in ("-f", str(ROOT / f))),
            "--profile", "*", "config", "--format", "json"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True,
                          env={**os.environ, "TIERBENCH_TAG": "0.1.0"})
    return json.loads(done.stdout)


def test_on_one_host_the_admitted_addresses_are_the_compose_files_own() -> None:
    config = host_config("docker-compose.yml", "compose/app-db.yml")
    # PHP-FPM: the web tier's address on the back network; PostgreSQL: the application tier's
    # and the seed job's (which now has a fixed address for it)
    assert access.host_admitted(config, ADMISSIONS) == {"APP_CLIENTS": ["198.18.2.10"],
                                            "DB_CLIENTS": ["198.18.2.30", "198.18.2.41"]}
    app = config["services"]["app"]["environment"]
    db = config["services"]["db"]["environment"]
    # each listens on its own address on the back network, the one Compose gives it
    assert app["APP_LISTEN"] == config["services"]["app"]["networks"]["back"]["ipv4_address"]
    assert db["DB_LISTEN"] == config["services"]["db"]["networks"]["back"]["ipv4_address"]
    # three web servers, each with its own application server, which admits only it
    three = host_config("docker-compose.yml", "compose/web-servers.yml", "compose/app-db.yml",
                        "compose/web-servers-app.yml")
    admitted = access.host_admitted(three, ADMISSIONS)
    assert [admitted[f"APP{n}_CLIENTS"] for n in ("", "2", "3")] == [
        ["198.18.2.10"], ["198.18.2.11"], ["198.18.2.12"]]
    assert admitted["DB_CLIENTS"] == ["198.18.2.30", "198.18.2.31", "198.18.2.32", "198.18.2.41"]
    fs = host_config("docker-compose.yml", "compose/fs.yml")
    # every client machine compose/fs.yml defines (fs-client, fs-client2 .. fs-client18)
    assert access.host_admitted(fs, ADMISSIONS) == {"FS_CLIENTS": [f"198.18.12.{20 + i}"
                                                                   for i in range(18)]}
    assert fs["services"]["fs-server"]["environment"]["FS_BIND"] == \
        fs["services"]["fs-server"]["networks"]["fs"]["ipv4_address"]


def test_a_client_without_a_fixed_address_is_one_sentence() -> None:
    config = host_config("docker-compose.yml", "compose/app-db.yml")
    del config["services"]["db-seed"]["networks"]["back"]["ipv4_address"]
    with pytest.raises(access.AccessError, match="service db-seed connects to db but has no "
                                                 "fixed address"):
        access.host_admitted(config, ADMISSIONS)


def test_on_a_cluster_each_tier_listens_on_its_nodes_address() -> None:
    files = model.host_files([str(ROOT / f) for f in (
        "docker-compose.yml", "compose/app-db.yml", "compose/fs.yml", "compose/net.yml",
        "compose/web-servers.yml")])
    env = {**os.environ, "TIERBENCH_NODE_DIR": "/srv/tb"}
    env.update({hostnet.env_name(s): f"10.20.0.{i}" for i, s in enumerate(
        ("web", "web2", "web3", "proxy", "app", "db", "fs-server", "net-server"), 1)})
    done = subprocess.run(["docker", "compose", *(a for f in files for a in ("-f", f)),
                           "--profile", "*", "config", "--format", "json"], cwd=ROOT,
                          capture_output=True, text=True, check=True, env=env)
    services = json.loads(done.stdout)["services"]
    listen = {"web": services["web"]["environment"]["APACHE_LISTEN"],
              "web2": services["web2"]["environment"]["APACHE_LISTEN"],
              "web3": services["web3"]["environment"]["APACHE_LISTEN"],
              "proxy": services["proxy"]["environment"]["APACHE_LISTEN"],
              "haproxy": services["proxy"]["environment"]["HAPROXY_BIND"],
              "app": services["app"]["environment"]["APP_LISTEN"],
              "db": services["db"]["environment"]["DB_LISTEN"],
              "fs-server": services["fs-server"]["environment"]["FS_BIND"],
              "net-server": services["net-server"]["environment"]["NET_BIND"]}
    assert listen == {"web": "10.20.0.1:8080", "web2": "10.20.0.2:8081", "web3": "10.20.0.3:8082",
                      "proxy": "10.20.0.4:80", "haproxy": "10.20.0.4:80", "app": "10.20.0.5",
                      "db": "10.20.0.6", "fs-server": "10.20.0.7", "net-server": "10.20.0.8"}


def test_no_overlay_falls_back_to_every_address() -> None:
    """Unset, a listening address falls back to loopback, never to 0.0.0.0 or '*'."""
    for path in sorted((ROOT / "compose").glob("*.yml")) + [ROOT / "docker-compose.yml"]:
        text = path.read_text()
        assert "0.0.0.0" not in text, path.name
        assert not re.search(r"\$\{(TIERBENCH_ADDR_\w+|MASTER_BIND):-\}", text), path.name


# --------------------------------------------------------------------------- PostgreSQL


def pg_hba(clients: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(IMAGES / "db" / "db-hba.sh")],
                          env={"PATH": os.environ["PATH"], "DB_CLIENTS": clients},
                          capture_output=True, text=True, timeout=30)


def test_pg_hba_has_one_line_per_admitted_address_of_the_example_rack() -> None:
    clients = access.env(access.cluster_admitted(clusterfile.load_cluster(ROOT / "cluster.example.yml", registry.roles()), ADMISSIONS))
    done = pg_hba(clients["DB_CLIENTS"])
    assert done.returncode == 0, done.stderr
    rules = [ln.split() for ln in done.stdout.splitlines() if ln and not ln.startswith("#")]
    assert rules == [["local", "all", "postgres", "peer"],
                     ["host", "tierbench", "tierbench", "10.20.0.3/32", "scram-sha-256"],
                     ["host", "tierbench", "tierbench", "10.20.0.4/32", "scram-sha-256"]]


def test_pg_hba_of_the_lab_and_of_ipv6_addresses(tmp_path: Path) -> None:
    clients = access.env(access.cluster_admitted(lab_file(tmp_path, 4), ADMISSIONS))["DB_CLIENTS"]
    done = pg_hba(clients + ",fd00::14")
    hosts = [ln.split()[3] for ln in done.stdout.splitlines() if ln.startswith("host ")]
    assert hosts == ["198.18.16.13/32", "198.18.16.14/32", "fd00::14/128"]
    for word in ("samenet", "samehost", "trust", "all all", "0.0.0.0", "::/0"):
        assert word not in done.stdout


@pytest.mark.parametrize("clients, fragment", [
    ("", "DB_CLIENTS is empty"),
    ("samenet", "names 'samenet', which is not an IP address"),
    ("10.0.0.1,0.0.0.0/0", "names '0.0.0.0/0'"),
])
def test_pg_hba_refuses_anything_but_addresses(clients: str, fragment: str) -> None:
    done = pg_hba(clients)
    assert done.returncode == 2 and fragment in done.stderr
    assert done.stdout == ""  # nothing half written: db-start.sh starts nothing


def test_the_database_start_script_sets_the_password_from_the_environment_only() -> None:
    text = (IMAGES / "db" / "db-start.sh").read_text()
    assert "listen_addresses=\"$DB_LISTEN\"" in text and "listen_addresses='*'" not in text
    assert "db-hba.sh" in text and "samenet" not in text
    # the statement that holds the password goes in on standard input; its output and errors
    # (which would quote it) are dropped
    line = next(ln for ln in text.splitlines() if "ALTER ROLE tierbench PASSWORD" in ln)
    assert line.lstrip().startswith(">/dev/null 2>&1 <<<")
    dockerfile = (IMAGES / "db" / "Dockerfile").read_text()
    assert '"-h", "/run/postgresql"' in dockerfile  # the healthcheck needs no network address


# --------------------------------------------------------------------------- PHP-FPM


def pool() -> dict[str, dict[str, str]]:
    pools: dict[str, dict[str, str]] = {}
    current = None
    for line in (IMAGES / "app" / "conf" / "pool.conf").read_text().splitlines():
        line = line.split(";", 1)[0].strip()
        if line.startswith("["):
            current = pools.setdefault(line.strip("[]"), {})
        elif "=" in line and current is not None:
            key, value = (x.strip() for x in line.split("=", 1))
            current[key] = value
    return pools


def test_php_fpm_admits_only_the_web_tier_and_hands_its_workers_only_what_they_read() -> None:
    app = pool()["app"]
    assert app["listen"] == "${APP_LISTEN}"
    assert app["listen.allowed_clients"] == "${APP_CLIENTS}"
    assert app["clear_env"] == "yes"
    assert {k: v for k, v in app.items() if k.startswith("env[")} == {
        "env[DB_HOST]": "$DB_HOST", "env[DB_PORT]": "$DB_PORT", "env[DB_ROWS]": "$DB_ROWS",
        "env[DB_PASSWORD]": "$DB_PASSWORD"}
    # what dyn.php reads is exactly what the workers get
    read = set(re.findall(r"getenv\('(\w+)'\)", (IMAGES / "app" / "dyn.php").read_text()))
    assert read == {"DB_HOST", "DB_PORT", "DB_ROWS", "DB_PASSWORD"}
    # the healthcheck's pool is a local socket: the container's own address is never admitted
    health = pool()["health"]
    assert health["listen"].startswith("/") and health["listen.mode"] == "0600"
    assert health["listen"] in (IMAGES / "app" / "app-healthcheck.sh").read_text()


def app_start(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """app-start.sh with a stand-in php-fpm8.2 that prints what it would listen on."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    fake = bindir / "php-fpm8.2"
    fake.write_text('#!/bin/sh\necho "listen=$APP_LISTEN clients=$APP_CLIENTS"\n')
    fake.chmod(0o755)
    return subprocess.run(["sh", str(IMAGES / "app" / "app-start.sh")],
                          env={"PATH": f"{bindir}:{os.environ['PATH']}", **env},
                          capture_output=True, text=True, timeout=30)


def test_php_fpm_starts_on_the_address_for_the_lab_web_node(tmp_path: Path) -> None:
    clients = access.env(access.cluster_admitted(lab_file(tmp_path, 4), ADMISSIONS))["APP_CLIENTS"]
    done = app_start(tmp_path, APP_LISTEN="198.18.16.13", APP_CLIENTS=clients, DB_PASSWORD="x")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "listen=198.18.16.13:9000 clients=198.18.16.13"
    six = app_start(tmp_path, APP_LISTEN="fd00::13", APP_CLIENTS="fd00::12", DB_PASSWORD="x")
    assert six.stdout.strip() == "listen=[fd00::13]:9000 clients=fd00::12"


@pytest.mark.parametrize("env, fragment", [
    ({"APP_LISTEN": "10.0.0.1", "DB_PASSWORD": "x"}, "APP_CLIENTS is empty"),
    ({"APP_LISTEN": "10.0.0.1", "APP_CLIENTS": "any", "DB_PASSWORD": "x"},
     "APP_CLIENTS=any: only addresses"),
    ({"APP_CLIENTS": "10.0.0.2", "DB_PASSWORD": "x"}, "APP_LISTEN is empty"),
    ({"APP_LISTEN": "10.0.0.1", "APP_CLIENTS": "10.0.0.2"}, "DB_PASSWORD is empty"),
])
def test_php_fpm_refuses_to_start_open_to_anyone(tmp_path: Path, env: dict, fragment: str) -> None:
    done = app_start(tmp_path, **env)
    assert done.returncode == 2 and fragment in done.stderr and "listen=" not in done.stdout


# --------------------------------------------------------------------------- GlusterFS


def fs_server(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, str, str]:
    """fs-server.sh with stand-ins for glusterd (exits at once) and gluster (records its
    arguments), its glusterd.vol a copy of the package's shape: (process, gluster's
    arguments, the glusterd.vol it left)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "glusterd").write_text("#!/bin/sh\nsleep 0.2\n")
    (bindir / "gluster").write_text('#!/bin/sh\necho "$*" >> "$GLUSTER_LOG"\n'
                                    'case "$*" in *"volume info"*) exit 1;; esac\n')
    for tool in ("glusterd", "gluster"):
        (bindir / tool).chmod(0o755)
    vol = tmp_path / "glusterd.vol"
    vol.write_text("volume management\n    type mgmt/glusterd\n"
                   "    option transport.socket.listen-port 24007\n"
                   "    option transport.socket.bind-address 10.9.9.9\nend-volume\n")
    log = tmp_path / "gluster.log"
    log.write_text("")
    done = subprocess.run(["bash", str(IMAGES / "fs" / "fs-server.sh")],
                          env={"PATH": f"{bindir}:{os.environ['PATH']}", "GLUSTERD_VOL": str(vol),
                               "GLUSTER_LOG": str(log), "FS_BRICK": str(tmp_path / "brick"),
                               "FS_BRICK_HOST": "10.20.0.4", **env},
                          capture_output=True, text=True, timeout=60)
    return done, log.read_text(), vol.read_text()


def test_the_file_server_binds_its_address_and_admits_the_example_racks_client(
        tmp_path: Path) -> None:
    clients = access.env(access.cluster_admitted(clusterfile.load_cluster(ROOT / "cluster.example.yml", registry.roles()), ADMISSIONS))
    done, gluster, vol = fs_server(tmp_path, FS_BIND="10.20.0.4", FS_CLIENTS=clients["FS_CLIENTS"])
    assert "glusterd exited" in done.stderr  # the stand-in's end, after the volume was set up
    assert "volume set share auth.allow 10.20.0.1" in gluster
    lines = gluster.splitlines()
    assert lines.index("--mode=script volume set share auth.allow 10.20.0.1") < \
        lines.index("--mode=script volume start share force")
    # glusterd (and the brick it starts) bind only the server's address; an older one is gone
    assert [ln.strip() for ln in vol.splitlines() if "bind-address" in ln] == [
        "option transport.socket.bind-address 10.20.0.4"]


@pytest.mark.parametrize("env, fragment", [
    ({"FS_BIND": "10.20.0.4"}, "FS_CLIENTS is empty"),
    ({"FS_CLIENTS": "10.20.0.1"}, "FS_BIND is empty"),
    ({"FS_BIND": "10.20.0.4", "FS_CLIENTS": "*"}, "only addresses"),
])
def test_the_file_server_refuses_to_start_open_to_anyone(tmp_path: Path, env: dict,
                                                         fragment: str) -> None:
    done, gluster, _ = fs_server(tmp_path, **env)
    assert done.returncode == 2 and fragment in done.stderr and gluster == ""


# --------------------------------------------------------------------------- the password


def test_the_password_is_random_private_and_kept_while_the_stack_is_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERBENCH_STATE_DIR", str(tmp_path / "state"))
    first = access.database_password()
    assert len(first) >= 40 and re.fullmatch(r"[A-Za-z0-9_-]+", first)
    path = access.password_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert access.database_password() == first  # the same stack, the same password
    access.forget_database_password()
    second = access.database_password()
    assert second != first  # a new bring-up, a new one
    path.chmod(0o644)
    with pytest.raises(access.AccessError, match="must be a file only user"):
        access.database_password()


def test_a_stack_with_the_database_gets_the_password_and_the_admitted_addresses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERBENCH_STATE_DIR", str(tmp_path / "state"))
    env = compose.access_env(host_config("docker-compose.yml", "compose/app-db.yml"), ADMISSIONS)
    assert env == {"APP_CLIENTS": "198.18.2.10", "DB_CLIENTS": "198.18.2.30,198.18.2.41",
                   "DB_PASSWORD": access.password_path().read_text().strip()}
    rack = clusterfile.load_cluster(ROOT / "cluster.example.yml", registry.roles())
    static = compose.access_env(host_config("docker-compose.yml"), ADMISSIONS, rack)
    assert "DB_PASSWORD" not in static and static["APP_CLIENTS"] == "10.20.0.3"


def test_no_password_in_any_image_or_compose_file() -> None:
    for path in sorted(IMAGES.rglob("Dockerfile")):
        for line in path.read_text().splitlines():
            assert "PASSWORD" not in line or line.lstrip().startswith("#"), (path, line)
    for path in sorted((ROOT / "compose").glob("*.yml")) + [ROOT / "docker-compose.yml"]:
        for line in path.read_text().splitlines():
            if "PASSWORD:" in line and not line.lstrip().startswith("#"):
                assert line.split(":", 1)[1].strip() == "${DB_PASSWORD:-}", (path, line)
