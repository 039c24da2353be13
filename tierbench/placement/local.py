"""This host's placement: the Compose project on this host's Docker engine, its networks, veth
pairs and cgroups (:class:`LocalPlacer`, the default placer; tierbench.placement.placer is the
interface, tierbench.placement.cluster the other placement)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tierbench.interfaces import netif
from tierbench.interfaces.netif import Endpoint
from tierbench.measure.sampler import CgroupCpu, Sampler
from tierbench.placement import compose
from tierbench.placement.model import Container, Services, StackError
from tierbench.placement.placer import Placer
from tierbench.transport import run_argv


class LocalPlacer(Placer):
    """This host's Docker engine: the Compose project and its networks, veth pairs, cgroups."""

    name = "this host"

    def up(self, spec: Services) -> None:
        """compose up on this host (compose.up_spec)."""
        compose.up_spec(spec)

    def down(self, every: bool = False) -> None:
        """compose down (compose.down), then what the shared tiers built here (tiers_down:
        the disk systems)."""
        compose.down(every)
        self.tiers_down(every)

    def replicas(self) -> list[Container]:
        """The project's running containers (compose.replicas)."""
        return compose.replicas()

    def endpoints(self, label: str, container: Container) -> list[Endpoint]:
        """The container's veth and its host peer."""
        return netif.veth_endpoints(label, container.pid)

    def counter(self, container: Container) -> CgroupCpu:
        """The container's cgroup, read on this host."""
        return CgroupCpu(container.pid)

    def sampler(self, out: Path, counters: dict[str, Any], ifaces: dict[str, str],
                probes: dict[str, Any] | None = None) -> Sampler:
        """The single-host sampler."""
        return Sampler(out, counters, ifaces, probes=probes)

    def ifaces(self, endpoints: list[Endpoint]) -> dict[str, str]:
        """The host ends of the veths."""
        return {ep.label: ep.ifname for ep in endpoints if ep.netns_pid is None}

    def received(self, endpoints: list[Endpoint]) -> list[tuple[str, str]]:
        """What the host ends of their veths transmit into the containers."""
        return [(ep.label, "tx_bytes") for ep in endpoints if ep.netns_pid is None]

    def host_endpoints(self, names: tuple[str, ...], containers: list[Container]) -> list[Endpoint]:
        """This host's interfaces of those names."""
        return [Endpoint("host", name, None) for name in names]

    def address(self, container: Container, subnet: str | None = None) -> str:
        """The container's address on the network whose addresses start with ``subnet``."""
        done = run_argv(["docker", "inspect", "-f",
                         "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}",
                         container.id], timeout=30)
        found = [a for a in done.stdout.split() if subnet is None or a.startswith(subnet)]
        if not found:
            raise StackError(f"{container.name} has no address"
                             + (f" starting with {subnet}" if subnet else ""))
        return found[0]

    def proc_net(self, container: Container, names: tuple[str, ...]) -> str:
        """/proc/PID/net/NAME of the container's process, read here."""
        tables = []
        for name in names:
            try:
                tables.append(Path(f"/proc/{container.pid}/net/{name}").read_text())
            except OSError:
                continue
        return "".join(tables)

    def drop_caches(self, containers: list[Container]) -> None:
        """Write back, then drop this host's page cache."""
        run_argv(["sync"], timeout=300, stdout=None, stderr=None)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
