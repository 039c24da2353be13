"""This host's placement: the Compose project on this host's Docker engine (:class:`LocalPlacer`,
the default placer; tierbench.placement.placer is the interface, whose own answers are this
host's: its networks, veth pairs and cgroups; tierbench.placement.cluster the other placement)."""

from __future__ import annotations

from collections.abc import Iterable

from tierbench.placement import compose
from tierbench.placement.model import Container, Services
from tierbench.placement.placer import Placer


class LocalPlacer(Placer):
    """This host's Docker engine: the Compose project; its networks, veth pairs and cgroups are
    the interface's own answers (Placer)."""

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

    def ensure_images(self, names: Iterable[str], how: str = "`make images`") -> None:
        """Built here with setup/images.sh (compose.ensure_images)."""
        compose.ensure_images(names, how)

    def compose_config(self, args: list[str], env: dict[str, str], timeout: float = 60) -> str:
        """`docker compose ARGS` in the checkout (compose.compose)."""
        return compose.compose(args, env, timeout)
