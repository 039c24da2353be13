"""What the pfs kind declares to the placement: the OrangeFS tier's cluster-file roles and CPU
lists (tiers/orangefs.py, which the web kind's docroot on OrangeFS and the fs kind's OrangeFS
runs declare too)."""

from __future__ import annotations

from tierbench.tiers.orangefs import CPUSETS, ROLES

__all__ = ["CPUSETS", "ROLES"]
