"""How many requests each client of a request-count run sends (000 §5.2.1, 004 §3.2: every
client sends N requests after the warm-up). A shortened run (`--scale`) of small files, or of a
fast storage, would answer N in a fraction of a second, too short for the 1 Hz samples that give
CPU and bytes; both engines (tierbench.kinds.web.wrk, workloads/locust/trace_replay.py) then
raise N to what the warm-up's rate answers in ``aim_s``, and the row records both counts.

Plain Python: the Locust file imports it inside the load generator (PYTHONPATH=/app)."""

from __future__ import annotations

import math


def counted_enough(asked: int, answered: int, seconds: float, clients: int,
                   aim_s: float) -> int:
    """``asked``, or, when ``clients`` clients answering ``answered`` requests in ``seconds``
    (the warm-up) would send ``asked`` each in less than ``aim_s``, enough for ``aim_s`` at that
    rate. Nothing to go by (no warm-up, no aim): ``asked``."""
    if aim_s <= 0 or seconds <= 0 or answered <= 0 or clients <= 0:
        return asked
    per_client = answered / seconds / clients
    if asked / per_client >= aim_s:
        return asked
    return max(asked, math.ceil(aim_s * per_client))
