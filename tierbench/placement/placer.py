"""Where the services of a run go, behind one interface the kinds call: bring services up and
down, list and stop their containers, run commands in them, the interfaces a mode acts on and
the counters the sampler reads, and the files a load generator reads and writes.

Two placements implement it: ``tierbench.placement.local.LocalPlacer``, this host's Docker engine
(Compose networks, veth pairs, cgroups read here; the default), and
``tierbench.placement.cluster.ClusterPlacer``, bare-metal nodes through Docker contexts with host
networking (``--cluster FILE``). This module imports neither, nor Compose: only the placement's
model (tierbench.placement.model: Services, Container, StackError); what it answers without
them is this host's (veths, cgroups, /proc read here). The command line
makes one for a run and the experiment carries it (``Experiment.placer``) to the kinds, which
never know which it is. Every command a kind runs in a container, and every container it starts
or stops, goes through it (:meth:`Placer.exec`, :meth:`Placer.popen`, :meth:`Placer.start`,
:meth:`Placer.stop`), over the container's transport (tierbench.transport), and so does every
command it runs on a host (:meth:`Placer.host`: this machine, or the role's node): a kind never
asks which placement it is on (tests/test_architecture.py: no kind reads ``cluster``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tierbench.config.files import state_dir
from tierbench.interfaces import netif
from tierbench.interfaces.netif import Endpoint
from tierbench.measure.sampler import CgroupCpu, CgroupGroup, Sampler
from tierbench.placement import model
from tierbench.placement.model import Container, Services, StackError
from tierbench.transport import (LOCAL, CompletedProcess, Process, Transport, TransportError,
                                 run_argv, start_argv)


class Placer:
    """The interface, with this host's answers (a cluster's placer overrides each): what needs
    Compose, bringing services up and down, finding them, building images and reading compose
    files, is a placement's own (LocalPlacer, placement/local.py; ClusterPlacer). ``Placer()``
    itself is this host with nothing brought up: where an experiment loaded without a placement
    is planned and checked (the default of Experiment.placer, Deployment.placer and the web
    kind's LoadSpec.where; a command that runs makes its placer: the command line)."""

    name = "this host"
    cluster: Any = None
    # Seconds a kind adds to its common start when it launches processes with `docker exec`
    # (a container on a node is reached through SSH first; see ClusterPlacer).
    exec_lead_s = 0.0

    def up(self, spec: Services) -> None:
        """Bring ``spec``'s services up and wait until they are healthy."""
        raise NotImplementedError

    def ensure_images(self, names: Iterable[str], how: str = "`make images`") -> None:
        """The images NAMES (tierbench-NAME:TAG) built on this host and up to date (the first
        time a run needs them, or after their build context changed; a cluster ships them to
        its nodes at bring-up); StackError saying how to build them by hand (``how``)."""
        raise NotImplementedError

    def compose_config(self, args: list[str], env: dict[str, str], timeout: float = 60) -> str:
        """`docker compose ARGS` in the checkout on this host, where Compose reads the files of
        every placement: ARGS are the files' options, then `config` and its own (the files
        merged as Compose merges them, the services they define); StackError naming the
        failure."""
        raise NotImplementedError

    def down(self, every: bool = False) -> None:
        """Remove every service of this checkout's project, its networks and volumes
        (``every``: every checkout's, `tierbench clean --all`), then what the shared tiers built
        on its hosts for them (:meth:`tiers_down`)."""
        raise NotImplementedError

    def tiers_down(self, every: bool = False) -> None:
        """What the shared tiers built on this placement's hosts for its services removed, once
        the containers that used it are gone (each placer's ``down`` ends with it): every step
        of :data:`AFTER_DOWN` (the disk systems: tierbench.tiers.diskbuild)."""
        for step in AFTER_DOWN:
            step(self, every)

    def replicas(self) -> list[Container]:
        """Every running container of the project."""
        raise NotImplementedError

    def containers(self) -> dict[str, Container]:
        """The running containers by service (the first replica of a scaled one)."""
        found: dict[str, Container] = {}
        for c in self.replicas():
            found.setdefault(c.service, c)
        return found

    def service_containers(self, services: tuple[str, ...]) -> dict[str, Container]:
        """The running containers of these services; fails naming any that is not running."""
        found = self.containers()
        missing = [t for t in services if t not in found]
        if missing:
            raise StackError(f"service {missing[0]} is not running{self.where(missing[0])}: "
                             f"see `docker{self.context_arg(missing[0])} compose logs "
                             f"{missing[0]}`")
        return {t: found[t] for t in services}

    def where(self, service: str) -> str:
        """' on NODE' for a service placed on a node ('' on one host)."""
        return ""

    def context_arg(self, service: str) -> str:
        return ""

    def transport(self, container: Container) -> Transport:
        """How to reach the host a container runs on, and its engine (this host: LOCAL)."""
        return LOCAL

    def exec(self, container: Container, argv: list[str], *, env: dict[str, str] | None = None,
             user: str | None = None, timeout: float = 600,
             input: str | None = None) -> CompletedProcess:
        """Run a command in a container and wait for it (never raises on its exit code;
        transport.DidNotFinish when it does not finish within ``timeout`` s, TransportError
        when docker cannot run)."""
        argv = self.transport(container).exec_argv(container.id, argv, env=env, user=user,
                                                   interactive=input is not None)
        return run_argv(argv, timeout=timeout, input=input)

    def popen(self, container: Container, argv: list[str], *,
              env: dict[str, str] | None = None, user: str | None = None,
              interactive: bool = False, **kwargs: Any) -> Process:
        """Start a command in a container without waiting (subprocess.Popen's keywords: its
        output, a new session, ...)."""
        return start_argv(self.transport(container).exec_argv(
            container.id, argv, env=env, user=user, interactive=interactive), **kwargs)

    def docker(self, container: Container, *args: str,
               timeout: float = 60) -> CompletedProcess:
        """``docker ARGS`` on the engine the container runs on (never raises on its exit code;
        transport.DidNotFinish when it does not finish within ``timeout`` s, TransportError
        when docker cannot run)."""
        return run_argv(self.transport(container).docker(*args), timeout=timeout)

    def start(self, container: Container, timeout: float = 120) -> CompletedProcess:
        """Start a stopped container again (a tier a fault stopped)."""
        return self.docker(container, "start", container.id, timeout=timeout)

    def stop(self, container: Container, grace_s: int = 2) -> None:
        """Stop a container (a fault an experiment asks for)."""
        try:
            self.docker(container, "stop", "-t", str(grace_s), container.id)
        except TransportError:
            pass

    def endpoints(self, label: str, container: Container) -> list[Endpoint]:
        """The interfaces that carry a container's traffic, for modes (here: its veth and the
        host peer)."""
        return netif.veth_endpoints(label, container.pid)

    def counter(self, container: Container) -> Any:
        """The CPU counter of a container, for the sampler (here: its cgroup, read here)."""
        return CgroupCpu(container.pid)

    def sampler(self, out: Path, counters: dict[str, Any], ifaces: dict[str, str],
                probes: dict[str, Any] | None = None) -> Any:
        """A 1 Hz sampler of these counters, interfaces and probes (a kind's callables that
        read a server's own counters), writing JSON lines to ``out`` (here: the single-host
        sampler)."""
        return Sampler(out, counters, ifaces, probes=probes)

    def ifaces(self, endpoints: list[Endpoint]) -> dict[str, str]:
        """The interface counters to sample for these endpoints (label -> interface; here: the
        host ends of the veths)."""
        return {ep.label: ep.ifname for ep in endpoints if ep.netns_pid is None}

    def received(self, endpoints: list[Endpoint]) -> list[tuple[str, str]]:
        """(sampled interface label, counter) pairs that count the bytes the containers of
        ``endpoints`` receive (here: what the host ends of their veths transmit into them)."""
        return [(ep.label, "tx_bytes") for ep in endpoints if ep.netns_pid is None]

    def host_endpoints(self, names: tuple[str, ...], containers: list[Container]) -> list[Endpoint]:
        """A host-scope mode's interfaces ``names`` where ``containers`` run (here: this
        host's interfaces of those names)."""
        return [Endpoint("host", name, None) for name in names]

    def address(self, container: Container, subnet: str | None = None) -> str:
        """The address other services reach a container at (on one host: its address on the
        Compose network whose addresses start with ``subnet``)."""
        done = run_argv(["docker", "inspect", "-f",
                         "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}",
                         container.id], timeout=30)
        found = [a for a in done.stdout.split() if subnet is None or a.startswith(subnet)]
        if not found:
            raise StackError(f"{container.name} has no address"
                             + (f" starting with {subnet}" if subnet else ""))
        return found[0]

    def url(self, target: str) -> str:
        """A target URL naming a service (http://proxy) as the load generator reaches it."""
        return target

    def own_addresses(self) -> list[str]:
        """Addresses of the testbed's own services beyond the benchmarking range."""
        return []

    def shares_ports(self) -> bool:
        """Whether replicas of a service share one host's ports (host networking)."""
        return False

    def push(self, container: Container, paths: list[Path]) -> None:
        """Make files under the results folder visible to a container that mounts it."""

    def pull(self, container: Container, folder: Path) -> None:
        """Bring back what a container wrote into ``folder`` (under the results folder)."""

    def evict_volume(self, container: Container, volume: str) -> int:
        """Drop the files of the project's volume ``volume`` (its name in the Compose files)
        from the page cache of the host ``container`` runs on, written back first: the next
        read of each comes from the disk. Only the project's own volume is touched. Returns
        how many files."""
        name = f"{model.PROJECT}_{volume}"
        try:
            found = self.docker(container, "volume", "inspect", "-f", "{{.Mountpoint}}", name)
            why = (found.stderr.strip().splitlines() or ['no answer'])[-1]
        except TransportError as exc:
            found, why = None, str(exc)
        if found is None or found.returncode != 0:
            raise StackError(f"the volume {name} cannot be found{self.where(container.service)}"
                             f": {why}")
        try:
            done = self.transport(container).run(["python3", "-c", EVICT, found.stdout.strip()],
                                                 timeout=600)
        except TransportError as exc:
            raise StackError(f"dropping {name} from the page cache failed: {exc}") from None
        if done.returncode != 0:
            raise StackError(f"dropping {name} from the page cache"
                             f"{self.where(container.service)} failed: "
                             f"{(done.stderr.strip().splitlines() or ['no output'])[-1]}")
        return int(done.stdout.strip() or 0)

    def proc_net(self, container: Container, names: tuple[str, ...]) -> str:
        """Files of /proc/net (tcp, tcp6, snmp) of a container's network namespace, one after
        another, read from its host without entering the container (quick under load); the
        ones that cannot be read (the container stopped) left out (here: /proc/PID/net/NAME
        of the container's process)."""
        tables = []
        for name in names:
            try:
                tables.append(Path(f"/proc/{container.pid}/net/{name}").read_text())
            except OSError:
                continue
        return "".join(tables)

    def engines_answer(self) -> str | None:
        """Why a host's Docker engine does not answer (one sentence), or None."""
        return None

    def drop_caches(self, containers: list[Container]) -> None:
        """Drop the page cache of the hosts these containers run on (here: written back, then
        this host's dropped)."""
        run_argv(["sync"], timeout=300, stdout=None, stderr=None)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")

    # -- the hosts a kind's own commands run on: a kind never asks which placement it is on
    def hosts(self, role: str) -> list[Transport]:
        """The hosts ``role``'s services run on, as transports for a kind's own commands there
        (perf, /proc): this machine (LOCAL) on one host; on a cluster the role's nodes, in
        order (none when the cluster file leaves the role out: the run refuses that)."""
        return [LOCAL]

    def host(self, role: str, index: int = 0) -> Transport:
        """The host of the ``index``-th service of ``role`` (a role's services go round its
        hosts: web, web2, web3); StackError when no host has the role."""
        found = self.hosts(role)
        if not found:
            raise StackError(f"no host runs the services of role {role}")
        return found[index % len(found)]

    def here(self, role: str) -> bool:
        """Whether ``role``'s services run on this machine, whose devices, files and /proc a
        kind checks when an experiment loads (a node's are checked there when the run
        starts)."""
        return any(not h.remote for h in self.hosts(role))

    def folder(self, role: str) -> str:
        """This checkout's own folder on the host of ``role``'s first service, for files a
        kind makes there and removes (its state folder here; WORKDIR/PROJECT on a node)."""
        return str(state_dir())

    def cpu_containers(self, tiers: list[tuple[str, Container]]
                       ) -> list[tuple[str, Transport, int]] | None:
        """(tier, its host's transport, PID there) of the containers a cpu: mode acts on, by
        tier; None where the mode reaches them behind their interfaces' network namespaces
        (on one host)."""
        return None

    def named_ifaces(self, groups: dict[str, list[Endpoint]]) -> dict[str, str]:
        """The interface counters to sample for groups of endpoints (a tier's containers, by
        name): each group's own interfaces as NAME:IFNAME (a container's veth on one host);
        where containers share a host's interface (a node's NIC) each once, by its label."""
        return {f"{name}:{ifname}": ifname for name, eps in groups.items()
                for ifname in self.ifaces(eps).values()}

    # -- plan words
    def network_words(self, subnet: str, spread: str = "") -> str:
        """Where a kind's services talk, for a plan: the Compose network's ``subnet`` on one
        host; 'their nodes' on a cluster (``spread``: how they go round them, in brackets)."""
        return subnet

    def placed_words(self, servers: dict[str, list[str]]) -> str:
        """Each server's host, by role (``servers``: role -> its services), for a plan: '' on
        one host; on a cluster 'proxy node2, proxy2 node3; web node4' (the services of a role
        round its nodes; a role the cluster file leaves out: '?')."""
        return ""

    def every_host(self) -> list[tuple[Transport, str]]:
        """Every host this placement may run services on, with this checkout's folder there:
        this machine (LOCAL, its state folder); on a cluster every node of the cluster file
        (WORKDIR/PROJECT)."""
        return [(LOCAL, self.folder(""))]

    def provenance(self, when: str = "before") -> dict[str, Any]:
        """What the manifest records about the hosts beyond this one (nothing on one host)."""
        return {}

    def clean(self) -> list[str]:
        """Notes of what was removed beyond this host's stack (nothing on one host)."""
        return []


# What the shared tiers (tierbench.tiers, a floor above) remove from a placement's hosts after
# its services are down: each step is given the placer and ``every`` (Placer.tiers_down). A tier
# adds its step when it is imported (tierbench.tiers.diskbuild: the disk systems), so that the
# placement, which imports no floor above it, removes them at every `down` without naming them.
AFTER_DOWN: list[Callable[[Placer, bool], None]] = []


# Drops a folder's files from the page cache (python3 on the host that has them): written back
# first, then posix_fadvise DONTNEED on each; files that cannot be opened are skipped.
EVICT = ("import os,sys\nos.sync()\nn=0\nfor d,_,fs in os.walk(sys.argv[1]):\n"
         " for f in fs:\n  try: fd=os.open(os.path.join(d,f),os.O_RDONLY)\n"
         "  except OSError: continue\n  os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)"
         "\n  os.close(fd); n+=1\nprint(n)\n")


def counter_parts(counters: dict[str, Any]) -> dict[str, list[tuple[str, Any]]]:
    """Each tier's (label, counter) parts: one for a container, several for a group."""
    return {tier: list(c.parts.items()) if isinstance(c, CgroupGroup) else [(tier, c)]
            for tier, c in counters.items()}

