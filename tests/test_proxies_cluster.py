"""004's data center on a cluster without nodes (stack.proxies: 4, stack.web_servers: 3 and
dynamic requests): the proxy and app roles as one node or a list, proxy..proxy4 and app..app3
going round their nodes, each on its own port; proxy2.. written with host networking from the
stack's resolved proxy and compose/host-proxies.yml, balancing over the web servers at their
nodes' addresses; app2 and app3 at their nodes' addresses, each web server forwarding to its
own; each application server admitting only its web server's node, the database all three
application servers' nodes; the load generator's URL of each proxy; the plan on a cluster
(compose files read with `docker compose config`, which needs no engine)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tierbench.kinds import registry
from tierbench.kinds.web import roles as web_roles
from tierbench.kinds.web import services
from tierbench.placement import access, cluster, hostnet, local, model
from tierbench.placement.clusterfile import ClusterError, parse_cluster

ROOT = Path(__file__).resolve().parent.parent
STACK = ["docker-compose.yml", "compose/web-servers.yml", "compose/app-db.yml",
         "compose/web-servers-app.yml"]
LAB = {
    "version": 1,
    "nodes": [{"name": f"node{i}", "address": f"198.18.16.{10 + i}",
               "interfaces": [{"name": "eth0", "address": f"198.18.16.{10 + i}/24"}]}
              for i in range(1, 5)],
    # 004's data center on 4 nodes: the load generator and the database on node1, a proxy, a
    # web server and its application server on each of node2..node4 (the fourth proxy on node2)
    "roles": {"loadgen": "node1", "db": "node1", "proxy": ["node2", "node3", "node4"],
              "web": ["node2", "node3", "node4"], "app": ["node2", "node3", "node4"]},
}
IP = {f"node{i}": f"198.18.16.{10 + i}" for i in range(1, 5)}


def lab(**roles: object) -> object:
    data = copy.deepcopy(LAB)
    data["roles"].update(roles)
    return parse_cluster(data, registry.roles(), "lab.yml")


def compose_config(files: list[str], interpolate: bool, env: dict[str, str]) -> dict:
    argv = ["docker", "compose", *(a for f in files for a in ("-f", f)), "config",
            *([] if interpolate else ["--no-interpolate"]), "--format", "json"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True,
                          env={**os.environ, "TIERBENCH_TAG": "0.1.0", **env})
    return json.loads(done.stdout)


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The stack's files as the cluster placer reads them (proxy2..proxy4 written for a
    cluster, then every host-networking overlay) and a function resolving them with env."""
    monkeypatch.setenv("TIERBENCH_STATE_DIR", str(tmp_path))

    def files_with(stack_files: list[str]) -> list[str]:
        files = [str(ROOT / f) for f in stack_files]
        written = services.write_proxies_overlay(local.LocalPlacer(), files,
                                                 {**os.environ, "TIERBENCH_TAG": "0.1.0"}, 4,
                                                 host_network=True)
        return model.host_files([*files, str(written)])
    return files_with


def addresses(where: dict[str, dict[str, int]]) -> dict[str, str]:
    """TIERBENCH_ADDR_<SERVICE> as the placer sets them."""
    return {hostnet.env_name(s): IP[next(iter(h))] for s, h in where.items() if len(h) == 1}


def test_the_proxy_and_app_roles_take_one_node_or_a_list() -> None:
    assert lab().placement()["proxy"] == ["node2", "node3", "node4"]
    assert lab(proxy="node2", app="node3").placement()["app"] == ["node3"]
    with pytest.raises(ClusterError, match=r"roles\.proxy: node2 is listed twice"):
        lab(proxy=["node2", "node2"])
    with pytest.raises(ClusterError, match=r"roles\.app: no node named 'node9'"):
        lab(app=["node2", "node9"])
    with pytest.raises(ClusterError, match=r"roles\.db"):
        lab(db=["node1"])  # the database stays one node


def test_four_proxies_and_three_app_servers_go_round_their_nodes(stack) -> None:
    files = stack(STACK)
    conf = compose_config(files, True, {})
    wanted = [s for s in conf["services"] if s != "loadgen-worker"]
    where = hostnet.place(conf, wanted, {}, lab())
    assert {s: where[s] for s in ("proxy", "proxy2", "proxy3", "proxy4", "web", "web2",
                                  "web3", "app", "app2", "app3", "db", "db-seed",
                                  "loadgen")} == {
        "proxy": {"node2": 1}, "proxy2": {"node3": 1}, "proxy3": {"node4": 1},
        "proxy4": {"node2": 1}, "web": {"node2": 1}, "web2": {"node3": 1},
        "web3": {"node4": 1}, "app": {"node2": 1}, "app2": {"node3": 1}, "app3": {"node4": 1},
        "db": {"node1": 1}, "db-seed": {"node1": 1}, "loadgen": {"node1": 1}}
    # one proxy node: all four there, each on its own port
    one = hostnet.place(conf, wanted, {}, lab(proxy="node2", app="node2"))
    assert {s: one[s] for s in ("proxy", "proxy2", "proxy3", "proxy4", "app2", "app3")} == \
        dict.fromkeys(("proxy", "proxy2", "proxy3", "proxy4", "app2", "app3"), {"node2": 1})


@pytest.mark.parametrize("haproxy", [False, True])
def test_each_proxy_listens_at_its_node_and_port_and_balances_over_the_web_servers(
        stack, haproxy: bool) -> None:
    files = stack([*STACK[:2], *(["compose/haproxy.yml"] if haproxy else []), *STACK[2:]])
    conf = compose_config(files, True, {})
    where = hostnet.place(conf, [s for s in conf["services"] if s != "loadgen-worker"], {},
                          lab())
    svc = compose_config(files, True, {**addresses(where), "PROXY_CPUS": "1"})["services"]
    listen = "HAPROXY_BIND" if haproxy else "APACHE_LISTEN"
    for name, node, port in (("proxy", "node2", "80"), ("proxy2", "node3", "81"),
                             ("proxy3", "node4", "82"), ("proxy4", "node2", "83")):
        spec = svc[name]
        assert spec["network_mode"] == "host" and not spec.get("networks"), name
        assert spec["labels"][hostnet.ROLE_LABEL] == "proxy", name
        assert spec["labels"][hostnet.PORT_LABEL] == port, name
        assert spec["environment"][listen] == f"{IP[node]}:{port}", name
        assert spec["image"] == svc["proxy"]["image"], name
        assert (spec["environment"]["BACKEND"], spec["environment"]["BACKEND2"],
                spec["environment"]["BACKEND3"]) == (
            f"{IP['node2']}:8080", f"{IP['node3']}:8081", f"{IP['node4']}:8082"), name
        assert spec["cpuset"] == "1", name  # the proxy tier's CPUs on its node
    assert set(svc["loadgen"]["depends_on"]) >= {"proxy", "proxy2", "proxy3", "proxy4"}
    # the entries the copies take are those of compose/host-proxies.yml, one per extra proxy
    host = yaml.safe_load((ROOT / services.HOST_PROXIES_OVERLAY).read_text())
    assert sorted(host["services"]) == list(services.PROXY_SERVICES[1:])


def test_the_copies_take_the_host_overlays_as_compose_merges_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each copy of the proxy is merged with the proxy's entries of the host-networking
    overlays by `docker compose config` itself: an overlay's `!override` (which a merge by hand
    refused) replaces the proxy's environment, `!reset` drops its CPU list, and each copy's
    own entry of compose/host-proxies.yml comes last, its variables left for `up`."""
    monkeypatch.setenv("TIERBENCH_STATE_DIR", str(tmp_path))
    extra = tmp_path / "host-extra.yml"
    extra.write_text('services:\n  proxy:\n    environment: !override\n      ONLY: "1"\n'
                     '    cpuset: !reset null\n')
    real = cluster.host_files
    monkeypatch.setattr(services, "host_files", lambda files: [*real(files), str(extra)])
    files = [str(ROOT / f) for f in STACK[:2]]
    path = services.write_proxies_overlay(local.LocalPlacer(), files,
                                          {**os.environ, "TIERBENCH_TAG": "0.1.0"}, 3,
                                          host_network=True)
    written = json.loads(path.read_text())["services"]
    for name, port in (("proxy2", "81"), ("proxy3", "82")):
        spec = written[name]
        listen = f"${{TIERBENCH_ADDR_{name.upper()}:-127.0.0.1}}:{port}"
        # Compose writes them as KEY=VALUE lists when it does not interpolate
        assert sorted(spec["environment"]) == [f"APACHE_LISTEN={listen}",
                                               f"HAPROXY_BIND={listen}", "ONLY=1"], name
        assert "cpuset" not in spec and not spec.get("networks"), name
        assert spec["network_mode"] == "host", name
        assert f"{cluster.PORT_LABEL}={port}" in spec["labels"], name
    assert set(written) == {"proxy2", "proxy3", "loadgen"}


def test_compose_tags_are_kept_when_an_overlay_is_written_again() -> None:
    text = (ROOT / "compose" / "host-pvfs.yml").read_text()
    data = yaml.load(text, Loader=services.TagKeepingLoader)
    again = yaml.dump(data, Dumper=services.TagKeepingDumper, sort_keys=False)
    assert again.count("networks: !reset {}") == text.count("networks: !reset {}") > 0
    # a tagged scalar comes back quoted: !reset does not read its value, and !override
    # matters only for lists and mappings (a scalar is replaced anyway)
    assert again.count("hostname: !reset 'null'") == text.count("hostname: !reset null") > 0
    assert yaml.load(again, Loader=services.TagKeepingLoader) is not None


def test_the_load_generator_reaches_each_proxy_at_its_node_and_port(stack) -> None:
    files = stack(STACK)
    conf = compose_config(files, True, {})
    where = hostnet.place(conf, [s for s in conf["services"] if s != "loadgen-worker"], {},
                          lab())
    placer = cluster.ClusterPlacer(lab())
    placer.placed = where
    placer.ports = {s: spec["labels"][hostnet.PORT_LABEL]
                    for s, spec in conf["services"].items()
                    if hostnet.PORT_LABEL in (spec.get("labels") or {})}
    assert [placer.url(f"http://{p}/") for p in services.PROXY_SERVICES] == [
        f"http://{IP['node2']}:80/", f"http://{IP['node3']}:81/", f"http://{IP['node4']}:82/",
        f"http://{IP['node2']}:83/"]


def test_each_app_server_listens_at_its_node_and_port_and_its_web_server_reaches_it(
        stack) -> None:
    files = stack(STACK)
    conf = compose_config(files, True, {})
    where = hostnet.place(conf, [s for s in conf["services"] if s != "loadgen-worker"], {},
                          lab(app="node2"))
    svc = compose_config(files, True, addresses(where))["services"]
    for name, port in (("app", "9000"), ("app2", "9001"), ("app3", "9002")):
        spec = svc[name]
        assert spec["network_mode"] == "host" and not spec.get("networks"), name
        assert spec["labels"] == {hostnet.ROLE_LABEL: "app", hostnet.PORT_LABEL: port}, name
        assert spec["environment"]["APP_LISTEN"] == IP["node2"], name
        assert spec["environment"].get("APP_PORT", "9000") == port, name
        assert spec["environment"]["DB_HOST"] == IP["node1"], name
    assert [svc[w]["environment"]["APP_BACKEND"] for w in ("web", "web2", "web3")] == [
        f"{IP['node2']}:9000", f"{IP['node2']}:9001", f"{IP['node2']}:9002"]
    # the image listens on APP_PORT (9000 when unset)
    start = (ROOT / "images" / "app" / "app-start.sh").read_text()
    assert 'APP_PORT=${APP_PORT:-9000}' in start and 'APP_LISTEN="$APP_LISTEN:$APP_PORT"' in start


def test_each_app_server_admits_only_its_web_servers_node_and_the_database_all_three(
        stack) -> None:
    files = stack(STACK)
    conf = compose_config(files, True, {})
    where = hostnet.place(conf, [s for s in conf["services"] if s != "loadgen-worker"], {},
                          lab())
    placed = {s: list(h) for s, h in where.items()}
    assert access.cluster_admitted(lab(), web_roles.ADMISSIONS, placed) == {
        "APP_CLIENTS": [IP["node2"]], "APP2_CLIENTS": [IP["node3"]],
        "APP3_CLIENTS": [IP["node4"]],
        "DB_CLIENTS": [IP["node2"], IP["node3"], IP["node4"], IP["node1"]]}
    # without the services' nodes: every node of the roles (an app server would admit every
    # web node); with one web node, each app server admits that node
    loose = access.cluster_admitted(lab(), web_roles.ADMISSIONS)
    assert loose["APP2_CLIENTS"] == [IP["node2"], IP["node3"], IP["node4"]]
    one = hostnet.place(conf, [s for s in conf["services"] if s != "loadgen-worker"], {},
                        lab(web="node3"))
    assert access.cluster_admitted(lab(web="node3"), web_roles.ADMISSIONS,
                                   {s: list(h) for s, h in one.items()})["APP3_CLIENTS"] == \
        [IP["node3"]]
    # each application server reads its own list at `up`
    env = {**addresses(where), **access.env(access.cluster_admitted(lab(), web_roles.ADMISSIONS,
                                                                    placed))}
    up = compose_config(files, True, env)["services"]
    assert [up[n]["environment"]["APP_CLIENTS"] for n in ("app", "app2", "app3")] == \
        [IP["node2"], IP["node3"], IP["node4"]]
    assert up["db"]["environment"]["DB_CLIENTS"] == ",".join(
        IP[n] for n in ("node2", "node3", "node4", "node1"))


def test_the_004_data_center_plans_on_a_cluster(tmp_path: Path) -> None:
    path = tmp_path / "lab.yml"
    path.write_text(yaml.safe_dump(LAB))
    done = subprocess.run([str(ROOT / ".venv" / "bin" / "tierbench"), "plan", "dc-static",
                           "--cluster", str(path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "4 proxies" in done.stdout
    for role, nodes in (("proxy", "node2, node3, node4"), ("web", "node2, node3, node4"),
                        ("loadgen", "node1")):
        assert role in done.stdout and nodes in done.stdout, (role, done.stdout)
