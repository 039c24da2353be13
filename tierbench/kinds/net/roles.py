"""The cluster file's roles the network micro-benchmarks' services run on."""

from __future__ import annotations

from tierbench.placement.model import Role

ROLES = (
    Role("net_server", "the server side of the network micro-benchmarks", server=True),
    Role("net_client", "the client side of the network micro-benchmarks"),
)
