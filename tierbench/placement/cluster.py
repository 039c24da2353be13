"""The cluster placement: every service on the node its role names, with host networking,
through each node's Docker context (``docker --context NODE compose ...``), and everything else a
run needs on the nodes over SSH.

- **Roles.** Each service on the nodes of the cluster file's role its host-networking overlay
  names, its node address reaching the others as ``TIERBENCH_ADDR_<SERVICE>``
  (tierbench.placement.hostnet decides where from the Compose files alone).
- **Bring-up.** In dependency order, service by service on its nodes: ``run --rm --no-deps``
  for one-shot jobs, ``up -d --wait --no-deps`` for the others (a dependency on another node is
  up and healthy before its dependents start). Images are shipped to each node first (only
  those whose ID differs, their IDs recorded), and the checkout's ``workloads/`` is copied to its
  own folder in the cluster file's ``workdir`` on each node (``WORKDIR/PROJECT``: another
  checkout's never touched); tmpfs the services bind are mounted on their nodes. A node where
  another checkout's stack is up is refused first (with host networking it holds the ports).
- **Modes** act on each node's first data-plane interface, over SSH (the node transport of
  tierbench.interfaces.netif); **sampling** is one agent per node (tierbench.measure.agent),
  merged on the controller's clock with each node's measured offset.
- **Files.** The load generator's files (traces in, request logs and tool output out) go
  through ``WORKDIR/PROJECT/results`` on its node, copied there before a point and back after it.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import shlex
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from tierbench.config.files import ROOT, results_root
from tierbench.config.paths import MARKER
from tierbench.interfaces.netif import Endpoint
from tierbench.measure.agent import MergedSampler
from tierbench.placement import access, compose, nodes, owned, runlock
from tierbench.placement.model import PROJECT, Container, Services, StackError, host_files
from tierbench.placement.clusterfile import Cluster, ClusterError, Node
from tierbench.placement.hostnet import (PORT_LABEL, ROLE_LABEL, env_name, is_job, named_volumes,
                                         natural, place, topo_levels)
from tierbench.placement.nodes import NodeError
from tierbench.placement.placer import Placer, counter_parts
from tierbench.transport import DidNotFinish, Transport, TransportError, run_argv


class NodeDown(StackError):
    """A node's Docker engine stopped answering; the message names the node."""


class NodeCgroup:
    """A container's CPU counter on a node: read there by the node's sampling agent; ``via``
    reaches the node and ``offset`` is its clock's offset from the controller's (the profile
    of --profile categories runs perf there, tierbench.measure.profile)."""

    def __init__(self, node: str, pid: int, via: Transport | None = None,
                 offset: float = 0.0) -> None:
        self.node, self.pid, self.via, self.offset = node, pid, via, offset


def local_tar(args: list[str], *, timeout: float, input: bytes | None = None) -> bytes:
    """``tar ARGS`` on the controller (bytes in and out); NodeError when it fails."""
    done = run_argv(["tar", *args], input=input, text=False, timeout=timeout)
    if done.returncode != 0:
        raise NodeError(f"controller: `tar {shlex.join(args[:3])} ...` failed with exit code "
                        f"{done.returncode}: {nodes.tail(done.stderr) or 'no output'}")
    return done.stdout


def engine_down(node: str, detail: str) -> NodeDown | None:
    """NodeDown for a Docker CLI error that says the node's engine does not answer."""
    if "Cannot connect to the Docker daemon" in detail or "Is the docker daemon running" in detail:
        return NodeDown(f"{node}: its Docker engine does not answer (the daemon is not running "
                        "or does not listen on its socket)")
    return None


class ClusterPlacer(compose.Controller, Placer):
    """Services on cluster nodes (see the module's doc)."""

    # A `docker --context NODE exec` opens an SSH connection and the engine's API before the
    # command runs: on a loaded 2-core machine an iperf sender started 3.5 s after a 1 s lead
    # (net-b2b on two nodes, its point flagged `short`), so a point's common start is later.
    exec_lead_s = 3.0

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.name = f"cluster {cluster.path or ''}".strip()
        # this checkout's folder on every node, under the cluster file's workdir: its workloads,
        # results, disk mounts and images, never another checkout's
        self.node_dir = f"{cluster.workdir.rstrip('/')}/{PROJECT}"
        self.report: nodes.CheckReport | None = None
        self.offsets: dict[str, float] = {}
        self.placed: dict[str, dict[str, int]] = {}
        self.roles: dict[str, str | None] = {}
        self.ports: dict[str, str] = {}
        self.images: dict[str, dict[str, str]] = {}
        self.workloads_sent: set[str] = set()

    # -- nodes
    def node(self, name: str) -> Node:
        return self.cluster.node(name)

    def check(self, need_disk: dict[str, int] | None = None,
              need_mem: dict[str, int] | None = None) -> nodes.CheckReport:
        """Every node checked (reachable, Docker and Compose, interfaces, clock, disk, memory)
        before anything changes anywhere; ClusterError with every problem."""
        report = nodes.check_nodes(self.cluster, need_disk_bytes=need_disk or 0,
                                   need_mem_bytes=need_mem or 0)
        if report.problems:
            raise ClusterError(report.problems)
        # every node reachable: its run lock taken for the run under way (runlock.hold)
        runlock.take_nodes([nodes.transport(n) for n in self.cluster.nodes])
        self.report = report
        self.offsets = {name: r.offset_s for name, r in report.clocks.items()}
        return report

    def checked(self) -> nodes.CheckReport:
        return self.report or self.check()

    def each(self, names: list[str], fn: Any) -> dict[str, Any]:
        """fn(node) on each named node at once; results by node (exceptions are returned)."""
        out: dict[str, Any] = {}
        with concurrent.futures.ThreadPoolExecutor(max(1, min(8, len(names)))) as pool:
            futures = {n: pool.submit(fn, self.node(n)) for n in names}
        for n, f in futures.items():
            try:
                out[n] = f.result()
            except Exception as exc:  # noqa: BLE001 - reported per node by the caller
                out[n] = exc
        return out

    def refuse_others(self, used: list[str]) -> None:
        """StackError in one sentence when another checkout's stack is up on one of the nodes
        ``used``: with host networking it holds the ports this one's tiers need there."""
        for name in used:
            try:
                compose.refuse_others(partial(self.docker_out, self.node(name)), f"node {name}")
            except NodeError as exc:
                raise StackError(str(exc)) from None

    @staticmethod
    def docker_out(node: Node, *args: str) -> str:
        """`docker ARGS` on the node's engine, its output."""
        return nodes.run_docker(node, *args, timeout=60).stdout

    def compose_argv(self, node: Node, files: list[str],
                     profiles: Sequence[str] = ()) -> list[str]:
        return nodes.transport(node).docker("compose", "-p", PROJECT,
                                 *(a for f in files for a in ("-f", f)),
                                 *(a for p in profiles for a in ("--profile", p)))

    def run_compose(self, node: Node, argv: list[str], env: dict[str, str], timeout: float,
                    what: str) -> str:
        try:
            done = run_argv(argv, cwd=ROOT, env=env, timeout=timeout)
        except DidNotFinish:
            raise StackError(f"{node.name}: {what} did not finish within {timeout:.0f} s") from None
        if done.returncode != 0:
            detail = nodes.tail(done.stderr or done.stdout)
            down = engine_down(node.name, detail)
            if down is not None:
                raise down
            raise StackError(f"{node.name}: {what} failed: {detail or done.returncode}")
        return done.stdout

    # -- bring-up
    def config(self, files: list[str], env: dict[str, str], profiles: list[str],
               ) -> dict[str, Any]:
        """The resolved compose configuration (`docker compose config`: no engine needed)."""
        argv = ["docker", "compose", "-p", PROJECT, *(a for f in files for a in ("-f", f)),
                *(a for p in profiles for a in ("--profile", p)), "config", "--format", "json"]
        done = run_argv(argv, cwd=ROOT, env=env, timeout=60)
        if done.returncode != 0:
            raise StackError(f"`docker compose config` of {', '.join(Path(f).name for f in files)} "
                             f"failed: {nodes.tail(done.stderr)}")
        return json.loads(done.stdout)

    def up(self, spec: Services) -> None:
        """Bring ``spec`` up on the nodes, service by service in dependency order."""
        self.checked()
        files = host_files(spec.files)
        env = {**spec.env, "TIERBENCH_NODE_DIR": self.node_dir}
        # every profile: services named in the spec start whatever their profile (as `compose up
        # SERVICE` does); roles and dependencies first, the addresses they give next
        raw = self.config(files, env, ["*"])
        services = raw["services"]
        wanted = list(spec.services or [s for s, v in services.items()
                                        if not v.get("profiles")
                                        or set(v["profiles"]) & set(spec.profiles)])
        for name in list(wanted):  # and what they depend on
            for dep in services[name].get("depends_on") or {}:
                if dep not in wanted:
                    wanted.append(dep)
        where = place(raw, wanted, spec.scale, self.cluster)
        for name, hosts in where.items():
            if len(hosts) == 1:
                env[env_name(name)] = self.node(next(iter(hosts))).interface().ip
        config = self.config(files, env, ["*"])
        used = sorted({n for hosts in where.values() for n in hosts}, key=natural)
        self.refuse_others(used)
        self.prepare_nodes(used, {n: sorted({config["services"][s]["image"] for s, h in
                                             where.items() if n in h})
                                  for n in used})
        self.mount_tmpfs(spec.tmpfs, config, where)
        stale = self.stale_volumes(config, where)
        if stale:
            compose.log(f"tierbench: volume(s) {', '.join(stale)} were made for other settings by "
                        "an earlier run: removing the stack first")
            self.down()
            self.mount_tmpfs(spec.tmpfs, config, where)
        # the peers each service admits: its clients' nodes (of the cluster file's roles for
        # them); the database password
        env.update(compose.access_env(config, spec.admissions, self.cluster, where))
        self.placed = where
        self.roles = {name: (config["services"][name].get("labels") or {}).get(ROLE_LABEL)
                      for name in where}
        self.ports = {name: str((config["services"][name].get("labels") or {}).get(PORT_LABEL))
                      for name in where
                      if (config["services"][name].get("labels") or {}).get(PORT_LABEL)}
        deps = {s: list(config["services"][s].get("depends_on") or {}) for s in wanted}
        for level in topo_levels(wanted, deps):  # a level's nodes at once, in order
            results = self.each(sorted({n for s in level for n in where[s]}, key=natural),
                                lambda node, level=level: self.start_on(
                                    node, level, where, files, env, spec, config, wanted))
            for result in results.values():
                if isinstance(result, Exception):
                    raise result

    def start_on(self, node: Node, level: list[str], where: dict[str, dict[str, int]],
                 files: list[str], env: dict[str, str], spec: Services, config: dict[str, Any],
                 wanted: list[str]) -> None:
        """The services of one dependency level that go on ``node``; its server tiers under the
        node's own common parent cgroup (a platform per node)."""
        base = self.compose_argv(node, files, ["*"])
        env = {**spec.cgroup_env(compose.cgroup_driver(nodes.transport(node).docker()),
                                 node.name), **env, **spec.node_env.get(node.name, {})}
        for name in level:
            count = where[name].get(node.name)
            if not count:
                continue
            if is_job(name, config, wanted):
                self.run_compose(node, [*base, "run", "--rm", "--no-deps", "-T", name], env,
                                 spec.timeout, f"the one-shot job {name}")
            elif name in spec.replica_env and count > 1:
                self.start_replicas(node, base, name, spec.replica_env[name][:count], env, spec)
            else:
                self.run_compose(node, [*base, "up", "-d", "--wait", "--no-build", "--no-deps",
                                        "--scale", f"{name}={count}", name], env, spec.timeout,
                                 f"starting {name}")

    def start_replicas(self, node: Node, base: list[str], name: str,
                       envs: list[dict[str, str]], env: dict[str, str], spec: Services) -> None:
        """Replicas that must differ on one host network (their ports): each a container of the
        service with its own environment, tierbench-NAME-1..N, healthy before returning."""
        self.run_compose(node, [*base, "rm", "-s", "-f", name], env, 120, f"removing {name}")
        for i, extra in enumerate(envs, 1):
            cname = f"{PROJECT}-{name}-{i}"
            nodes.run_docker(node, "rm", "-f", cname, check=False, timeout=60)
            sets = [a for k, v in extra.items() for a in ("-e", f"{k}={v}")]
            self.run_compose(node, [*base, "run", "-d", "--no-deps", "--name", cname, *sets,
                                    name], env, spec.timeout, f"starting {cname}")
        for i in range(1, len(envs) + 1):
            self.wait_healthy(node, f"{PROJECT}-{name}-{i}", spec.timeout)

    def wait_healthy(self, node: Node, cname: str, timeout: float) -> None:
        """Wait until a container started by tierbench is healthy (or has no healthcheck)."""
        deadline = time.monotonic() + timeout
        while True:
            state = nodes.run_docker(node, "inspect", "-f",
                                     "{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}"
                                     "{{end}}", cname, check=False, timeout=30).stdout.split()
            if state[:1] != ["running"] and state[:1] != ["created"]:
                raise StackError(f"{node.name}: {cname} is {' '.join(state) or 'gone'}: see "
                                 f"`docker --context {node.docker_context} logs {cname}`")
            if len(state) < 2 or state[1] == "healthy":
                return
            if time.monotonic() > deadline:
                raise StackError(f"{node.name}: {cname} did not become healthy within "
                                 f"{timeout:.0f} s")
            time.sleep(1)

    def prepare_nodes(self, used: list[str], images: dict[str, list[str]]) -> None:
        """Images shipped where they run, the workloads and the results folder on each node
        (one node after the other: `docker save` of several at once gains little and takes
        every core of the controller)."""
        for name in used:
            node = self.node(name)
            try:
                self.images.setdefault(name, {}).update(
                    nodes.ship_images(node, images[name], progress=compose.log))
                if name not in self.workloads_sent:
                    self.send_workloads(node)
                    self.workloads_sent.add(name)
            except NodeError as exc:
                raise StackError(str(exc)) from None

    def send_workloads(self, node: Node) -> None:
        """The checkout's workloads/ (its data/ left out) into WORKDIR/PROJECT on the node."""
        work = shlex.quote(self.node_dir)
        tar = local_tar(["-C", str(ROOT), "--exclude=workloads/data", "--exclude=__pycache__",
                         "-c", "workloads"], timeout=60)
        # the workdir tierbench's own (made with its marker, or adopted), refused otherwise;
        # this checkout's folder in it, the same way
        try:
            owned.claim_checkout(self.node_dir, nodes.transport(node))
        except owned.OwnershipError as exc:
            raise StackError(str(exc)) from None
        # emptied in place, not removed: containers a run left up bind-mount this folder, and
        # a new folder would leave them an empty, deleted one
        script = (f"mkdir -p {work}/results {work}/workloads && "
                  f"find {work}/workloads -mindepth 1 -delete && tar -C {work} -x")
        done = nodes.transport(node).run(script, input=tar, text=False, timeout=120)
        if done.returncode != 0:
            raise NodeError(f"{node.name}: copying workloads/ to {self.node_dir} failed: "
                            f"{nodes.tail(done.stderr)}")

    def mount_tmpfs(self, tmpfs: dict[str, str], config: dict[str, Any],
                    where: dict[str, dict[str, int]]) -> None:
        """Each tmpfs on the nodes of the services whose volumes bind it."""
        volumes = config.get("volumes") or {}
        for path, size in tmpfs.items():
            users = {key for key, v in volumes.items()
                     if ((v or {}).get("driver_opts") or {}).get("device") == path}
            hosts = {n for s, h in where.items() for n in h
                     if named_volumes(config["services"][s]) & users}
            q = shlex.quote(path)
            script = (f"mountpoint -q {q} || mount -t tmpfs -o "
                      f"size={shlex.quote(size)},mode=0755 {compose.TMPFS_SOURCE} {q}")
            for node in sorted(hosts):
                via = nodes.transport(self.node(node))
                if via.run(["mountpoint", "-q", path], timeout=60).returncode != 0:
                    self.claim(path, "the tmpfs folder", (), via)
                nodes.run_on_node(self.node(node), script, timeout=60)

    @staticmethod
    def claim(path: str, what: str, entries: tuple[str, ...], via: Transport) -> None:
        """owned.claim on a node, its refusal a StackError."""
        try:
            owned.claim(path, what, entries, via)
        except owned.OwnershipError as exc:
            raise StackError(str(exc)) from None

    def stale_volumes(self, config: dict[str, Any], where: dict[str, dict[str, int]]) -> list[str]:
        """Volumes on the nodes that exist with another driver or options than the files say."""
        wanted = config.get("volumes") or {}
        stale = []
        for node_name in sorted({n for h in where.values() for n in h}):
            keys = {v for s, h in where.items() if node_name in h
                    for v in named_volumes(config["services"][s])}
            for key in keys:
                spec = wanted.get(key) or {}
                name = spec.get("name") or f"{PROJECT}_{key}"
                done = nodes.run_docker(self.node(node_name), "volume", "inspect", name,
                                        check=False, timeout=60)
                if done.returncode != 0:
                    continue
                [info] = json.loads(done.stdout)
                if info.get("Driver") != (spec.get("driver") or "local") or \
                        (info.get("Options") or {}) != (spec.get("driver_opts") or {}):
                    stale.append(f"{name} on {node_name}")
        return stale

    def down(self, every: bool = False) -> None:
        """Every node: this checkout's project's containers, networks and volumes removed, its
        tmpfs unmounted (``every``: every checkout's); then what the shared tiers built on the
        nodes (and here) removed (tiers_down: the disk systems)."""

        def down(node: Node) -> None:
            compose.remove_project(lambda *args: nodes.run_docker(node, *args,
                                                                  timeout=300).stdout, every)
            nodes.run_on_node(node, compose.UNMOUNT_ALL_TMPFS if every else compose.UNMOUNT_TMPFS,
                              timeout=60)

        problems = [str(r) for r in self.each([n.name for n in self.cluster.nodes], down).values()
                    if isinstance(r, Exception)]
        access.forget_database_password()
        self.placed = {}
        if problems:
            raise StackError("; ".join(problems))
        self.tiers_down(every)  # after the containers that used them; on every node

    def every_host(self) -> list[tuple[Transport, str]]:
        """Every node of the cluster file, with this checkout's folder there (its workdir's)."""
        return [(nodes.transport(n), self.node_dir) for n in self.cluster.nodes]

    def role_node(self, role: str, index: int = 0) -> Node:
        """The node of the role's ``index``-th service: its services go round the role's
        nodes in order (:func:`place`); ClusterError when the cluster file leaves it out."""
        found = self.cluster.nodes_for(role)
        if not found:
            raise ClusterError([f"{self.cluster.path or 'cluster file'}: roles.{role}: not "
                                f"placed, and this needs {self.cluster.declared.role(role).what} "
                                "on a node"])
        return found[index % len(found)]

    # -- the hosts of a kind's own commands
    def hosts(self, role: str) -> list[Transport]:
        """The role's nodes (none when the cluster file leaves it out)."""
        return [nodes.transport(n) for n in self.cluster.nodes_for(role)]

    def host(self, role: str, index: int = 0) -> Transport:
        """The node of the role's ``index``-th service (:meth:`role_node`)."""
        return nodes.transport(self.role_node(role, index))

    def folder(self, role: str) -> str:
        """This checkout's folder in the cluster file's workdir (the same on every node)."""
        return self.node_dir

    def cpu_containers(self, tiers: list[tuple[str, Container]]
                       ) -> list[tuple[str, Transport, int]]:
        """Each container's node and its PID there."""
        return [(tier, self.transport(c), c.pid) for tier, c in tiers]

    def named_ifaces(self, groups: dict[str, list[Endpoint]]) -> dict[str, str]:
        """Each node's NIC once (node:interface), whichever groups it carries."""
        return self.ifaces([e for eps in groups.values() for e in eps])

    def network_words(self, subnet: str, spread: str = "") -> str:
        """Their nodes."""
        return "their nodes" + (f" ({spread})" if spread else "")

    def placed_words(self, servers: dict[str, list[str]]) -> str:
        """Each server's node, as :func:`place` puts a role's services round its nodes."""
        placement = self.cluster.placement()
        parts = []
        for role, names in servers.items():
            placed = placement.get(role, [])
            parts.append(", ".join(f"{name} {placed[i % len(placed)] if placed else '?'}"
                                   for i, name in enumerate(names)))
        return "; ".join(parts)

    # -- containers
    def replicas(self) -> list[Container]:
        """Every running container of the project on every node; NodeDown names a node whose
        engine does not answer."""
        facts = self.report.facts if self.report else {}
        found: list[tuple[str, int, Container]] = []
        results = self.each([n.name for n in self.cluster.nodes], self.node_replicas)
        for name, result in results.items():
            if isinstance(result, Exception):
                down = engine_down(name, str(result))
                raise down or result
            cpus = facts.get(name, {}).get("cpus")
            for service, number, c in result:
                if not c.cpuset and cpus:
                    c = Container(**{**c.__dict__, "cpuset": f"0-{int(cpus) - 1}"})
                found.append((service, number, c))
        return [c for _, _, c in sorted(found, key=lambda f: (f[0], f[1], f[2].node or ""))]

    def node_replicas(self, node: Node) -> list[tuple[str, int, Container]]:
        ids = nodes.run_docker(node, "ps", "-q", "--filter",
                               f"label=com.docker.compose.project={PROJECT}",
                               timeout=60).stdout.split()
        if not ids:
            return []
        out = []
        for info in json.loads(nodes.run_docker(node, "inspect", *ids, timeout=60).stdout):
            labels = info["Config"]["Labels"] or {}
            service = labels.get("com.docker.compose.service", "")
            number = int(labels.get("com.docker.compose.container-number", "1") or 1)
            name = info["Name"].lstrip("/")
            m = re.match(rf"^{PROJECT}-{re.escape(service)}-(\d+)$", name)
            if m:  # replicas started one by one (start_replicas) carry their number in the name
                number = int(m.group(1))
            out.append((service, number, Container(
                service=service, id=info["Id"], name=name, pid=int(info["State"]["Pid"]),
                image=info["Config"]["Image"], image_id=info["Image"],
                cpuset=info["HostConfig"].get("CpusetCpus") or "", node=node.name,
                context=node.docker_context)))
        return out

    def where(self, service: str) -> str:
        hosts = self.placed.get(service)
        return f" on {', '.join(hosts)}" if hosts else ""

    def context_arg(self, service: str) -> str:
        hosts = self.placed.get(service)
        return f" --context {self.node(next(iter(hosts))).docker_context}" if hosts else ""

    def transport(self, container: Container) -> Transport:
        """The container's node: over SSH, and its engine through the node's Docker context."""
        return nodes.transport(self.node(container.node or ""))

    # -- measurement and modes
    def endpoints(self, label: str, container: Container) -> list[Endpoint]:
        """The first data-plane interface of the container's node."""
        node = self.node(container.node or "")
        return [Endpoint(node.name, node.interface().name, None, nodes.transport(node),
                         self.peers(node.name))]

    def peers(self, name: str) -> tuple[str, ...]:
        """The data-plane addresses of the other nodes the run's services are on (every other
        node of the cluster file before anything is placed): where a node's tiers connect."""
        used = {n for hosts in self.placed.values() for n in hosts} or {
            n.name for n in self.cluster.nodes}
        own = {i.ip for i in self.node(name).interfaces}
        return tuple(dict.fromkeys(i.ip for n in self.cluster.nodes
                                   if n.name in used and n.name != name
                                   for i in n.interfaces if i.ip not in own))

    def counter(self, container: Container) -> NodeCgroup:
        """Read on the container's node by its sampling agent."""
        node = container.node or ""
        return NodeCgroup(node, container.pid, nodes.transport(self.node(node)),
                          self.offsets.get(node, 0.0))

    def ifaces(self, endpoints: list[Endpoint]) -> dict[str, str]:
        """The nodes' data-plane interfaces, by label (node:interface)."""
        return {ep.label: ep.ifname for ep in endpoints if ep.node}

    def received(self, endpoints: list[Endpoint]) -> list[tuple[str, str]]:
        """What the nodes' NICs receive, unless a node also hosts a server (then its NIC does not
        carry what the client alone receives: the summary counts the requests' bytes)."""
        serving = self.cluster.declared.servers
        servers = {n for s, hosts in self.placed.items()
                   if self.roles.get(s) in serving for n in hosts}
        eps = [ep for ep in endpoints if ep.node]
        if any(ep.node in servers for ep in eps):
            return []
        return [(ep.label, "rx_bytes") for ep in dict.fromkeys(eps)]

    def sampler(self, out: Path, counters: dict[str, Any], ifaces: dict[str, str],
                probes: dict[str, Any] | None = None) -> MergedSampler:
        """One sampling agent per node, merged on the controller's clock (probes read on the
        controller with each merged sample)."""
        per_node: dict[str, dict[str, Any]] = {}

        def entry(node: str) -> dict[str, Any]:
            return per_node.setdefault(node, {
                "via": nodes.transport(self.node(node)), "offset": self.offsets.get(node, 0.0),
                "containers": {}, "ifaces": {}})

        tiers: dict[str, list[tuple[str, str]]] = {}
        for tier, parts in counter_parts(counters).items():
            for label, c in parts:
                entry(c.node)["containers"][label] = c.pid
                tiers.setdefault(tier, []).append((c.node, label))
        for label, ifname in ifaces.items():
            entry(label.split(":", 1)[0])["ifaces"][label] = ifname
        return MergedSampler(out, per_node, tiers, probes=probes)

    def host_endpoints(self, names: tuple[str, ...], containers: list[Container]) -> list[Endpoint]:
        """Those interfaces on every node the containers run on."""
        used = list(dict.fromkeys(c.node for c in containers if c.node))
        return [Endpoint(n, name, None, nodes.transport(self.node(n)), self.peers(n))
                for n in used for name in names]

    def address(self, container: Container, subnet: str | None = None) -> str:
        """The data-plane address of the container's node."""
        return self.node(container.node or "").interface().ip

    def url(self, target: str) -> str:
        """http://SERVICE[/path] as http://NODE_ADDRESS:PORT[/path] of the node serving it."""
        m = re.match(r"^(https?)://([^/:]+)(?::\d+)?(/.*)?$", target)
        if not m or m.group(2) not in self.placed or m.group(2) not in self.ports:
            return target
        hosts = self.placed[m.group(2)]
        ip = self.node(next(iter(hosts))).interface().ip
        return f"{m.group(1)}://{ip}:{self.ports[m.group(2)]}{m.group(3) or ''}"

    def own_addresses(self) -> list[str]:
        """Every node's data-plane addresses."""
        return [i.ip for n in self.cluster.nodes for i in n.interfaces]

    def shares_ports(self) -> bool:
        """Host networking: the replicas on one node share its ports."""
        return True

    # -- files
    def push(self, container: Container, paths: list[Path]) -> None:
        """Copy files of the results folder to WORKDIR/PROJECT/results on the container's node (a
        folder: made there, empty)."""
        root = results_root()
        rel = [str(p.resolve().relative_to(root)) for p in paths]
        files = [r for r, p in zip(rel, paths) if not p.is_dir()]
        tar = local_tar(["-C", str(root), "-c", *files], timeout=300) if files else b""
        work = shlex.quote(f"{self.node_dir}/results")
        folders = " ".join(shlex.quote(f"{self.node_dir}/results/{r}")
                           for r, p in zip(rel, paths) if p.is_dir())
        script = f"mkdir -p {work} {folders}" + (f" && tar -C {work} -x" if files else "")
        done = self.transport(container).run(script, input=tar, text=False, timeout=300)
        if done.returncode != 0:
            raise NodeError(f"{container.node}: copying {', '.join(rel)} there failed: "
                            f"{nodes.tail(done.stderr)}")

    def pull(self, container: Container, folder: Path) -> None:
        """Copy what is in WORKDIR/PROJECT/results/<folder> on the container's node into ``folder``
        (files the controller has, such as the samples, are kept), then empty it there."""
        root = results_root()
        rel = shlex.quote(str(folder.resolve().relative_to(root)))
        work = shlex.quote(f"{self.node_dir}/results")
        done = self.transport(container).run(f"[ -d {work}/{rel} ] || exit 0; tar -C {work} -c "
                                             f"{rel} && find {work}/{rel} -mindepth 1 -delete",
                                             text=False, timeout=600)
        if done.returncode != 0:
            raise NodeError(f"{container.node}: copying {rel} back failed: "
                            f"{nodes.tail(done.stderr)}")
        if done.stdout:
            local_tar(["-C", str(root), "-x", "--skip-old-files"], input=done.stdout, timeout=300)

    def proc_net(self, container: Container, names: tuple[str, ...]) -> str:
        """/proc/PID/net/NAME of the container's process, read on its node over SSH (with host
        networking: the node's)."""
        pid = int(container.pid)
        files = " ".join(shlex.quote(f"/proc/{pid}/net/{name}") for name in names)
        return nodes.run_on_node(self.node(container.node or ""),
                                 f"cat {files} 2>/dev/null; true", timeout=60).stdout

    def engines_answer(self) -> str | None:
        """The first node whose Docker engine does not answer, as NodeDown says it."""
        try:
            self.replicas()
        except NodeDown as exc:
            return str(exc)
        return None

    def drop_caches(self, containers: list[Container]) -> None:
        """sync and drop the page cache on each node the containers run on."""
        for name in dict.fromkeys(c.node for c in containers if c.node):
            nodes.run_on_node(self.node(name), "sync && echo 3 > /proc/sys/vm/drop_caches",
                              timeout=300)

    # -- records
    def provenance(self, when: str = "before") -> dict[str, Any]:
        """Per node: kernel, CPU, ethtool -i of each data-plane interface, ethtool -k/-c/-g/-l
        (``when``: before or after the run), clock offset, images shipped and their IDs."""
        report = self.checked()

        def one(node: Node) -> dict[str, Any]:
            out = nodes.node_provenance(node) if when == "before" else {}
            out[f"nic_{when}"] = nic_settings(node)
            if when == "before":
                clock = report.clocks.get(node.name)
                out["clock_offset_s"] = clock.offset_s if clock else None
                out["clock_rtt_s"] = clock.rtt_s if clock else None
                out["data_plane"] = [i.model_dump() for i in node.interfaces]
                out["roles"] = [r for r, ns in self.cluster.placement().items()
                                if node.name in ns]
            return out

        results = self.each([n.name for n in self.cluster.nodes], one)
        return {name: (r if not isinstance(r, Exception) else {"error": str(r)})
                for name, r in results.items()}

    def images_by_node(self) -> dict[str, dict[str, str]]:
        """The images shipped to each node and their IDs there."""
        return {n: dict(ids) for n, ids in self.images.items()}

    def clean(self) -> list[str]:
        """The load generator's files left in WORKDIR/PROJECT/results on every node removed (after
        down())."""
        notes = [f"removed what a run left in {self.node_dir}/results on the nodes whose "
                 f"{MARKER} there names it"]
        for n in self.cluster.nodes:
            try:
                if not owned.remove_entry(self.node_dir, "results", nodes.transport(n)):
                    notes.append(f"{n.name}: left {self.node_dir}/results: no {MARKER} "
                                 "there names it as tierbench's")
            except TransportError as exc:
                notes.append(f"{n.name}: {exc}")
        return notes


_NIC = r"""
for itf in %s; do
  for opt in -k -c -g -l; do echo "== $itf $opt"; ethtool $opt "$itf" 2>&1 || true; done
done
"""


def nic_settings(node: Node) -> dict[str, dict[str, str]]:
    """``ethtool -k/-c/-g/-l`` of each data-plane interface of the node, as the tool printed."""
    names = " ".join(shlex.quote(i.name) for i in node.interfaces)
    out: dict[str, dict[str, list[str]]] = {}
    current: list[str] | None = None
    for line in nodes.run_on_node(node, _NIC % names, timeout=60).stdout.splitlines():
        if line.startswith("== "):
            itf, opt = line[3:].rsplit(" ", 1)
            current = []
            out.setdefault(itf, {})[f"ethtool {opt}"] = current
        elif current is not None:
            current.append(line)
    return {itf: {k: "\n".join(v).strip() for k, v in opts.items()}
            for itf, opts in out.items()}
