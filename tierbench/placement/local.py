"""This host's placement: the Compose project on this host's Docker engine (:class:`LocalPlacer`,
the default placer; tierbench.placement.placer is the interface, whose own answers are this
host's: its networks, veth pairs and cgroups; tierbench.placement.cluster the other placement)."""

from __future__ import annotations

from tierbench.placement import compose
from tierbench.placement.model import Container, Services
from tierbench.placement.placer import Placer


class LocalPlacer(compose.Controller, Placer):
    """This host's Docker engine: the Compose project (its images and the reading of its files:
    compose.Controller); its networks, veth pairs and cgroups are the interface's own answers
    (Placer)."""

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
