"""What the OrangeFS cluster declares to the placement: the cluster file's roles its services
run on (the web kind's docroot on OrangeFS and the fs kind's OrangeFS runs use them too) and the
CPU lists its compose files pin them to."""

from __future__ import annotations

from tierbench.placement.clusterfile import Role

ROLES = (
    Role("pfs_meta", "the OrangeFS metadata server", server=True),
    Role("pfs_io", "the OrangeFS I/O servers", nodes="list", server=True),
    Role("pfs_clients", "the OrangeFS clients", nodes="list"),
)

# The CPU-list variables compose/pvfs.yml reads (.env), with their defaults.
CPUSETS = {"PVFS_SERVER_CPUS": "1", "PVFS_CLIENT_CPUS": "0"}
