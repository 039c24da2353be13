"""What the file-server benchmarks declare to the placement: the cluster file's roles their
services run on (the OrangeFS tier's too, tiers/orangefs.py) and the file server that admits
only its clients."""

from __future__ import annotations

from tierbench.placement.model import Admission, Role
from tierbench.tiers import orangefs

ROLES = (
    Role("fs_server", "the GlusterFS file server of the file-server benchmarks (and its CPU hog)",
         server=True),
    # fs.clients: 18 (001's client machines) go round its nodes: fs-client, fs-client2 .. 18
    Role("fs_client", "the client machines of the file-server benchmarks (dbench, fio)",
         nodes="one_or_more"),
    *orangefs.ROLES,  # fs.server: orangefs
)

ADMISSIONS = (
    # the client machines mount the volume (compose/fs.yml: fs-client, fs-client2 .. 18)
    Admission("fs-server", "FS_CLIENTS",
              ("fs-client", *(f"fs-client{i}" for i in range(2, 19))), ("fs_client",),
              "the GlusterFS volume's auth.allow"),
)
