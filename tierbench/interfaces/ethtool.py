"""ethtool: the parsers of ``ethtool -l/-c/-g/-x`` output (channels, coalescing, rings and
header-data split, the RSS indirection table: pure functions, tested against captured output)
and an ethtool command's arguments from settings (run through
:func:`tierbench.interfaces.netif.run_in`, or ``netif.try_run`` to keep the tool's own
complaint).

Features and MTU are :mod:`tierbench.interfaces.netif`'s, RPS/XPS queue masks
:mod:`tierbench.interfaces.queues`', the root qdisc :mod:`tierbench.interfaces.qdisc`'s and
sysctls :mod:`tierbench.modes.sysctls`'; what a whole mode means is
:mod:`tierbench.modes.apply`'s business.
"""

from __future__ import annotations

import re
from typing import Any

from tierbench.interfaces import netif

_CHANNEL_LABELS = {"RX": "rx", "TX": "tx", "Other": "other", "Combined": "combined"}


_RING_LABELS = {
    "RX": "rx", "RX Mini": "rx-mini", "RX Jumbo": "rx-jumbo", "TX": "tx",
    "RX Buf Len": "rx-buf-len", "CQE Size": "cqe-size", "TX Push": "tx-push",
    "TCP data split": "tcp-data-split",
}


_PAIR = re.compile(r"^(Adaptive|CQE mode) RX:\s*(\S+)\s+TX:\s*(\S+)", re.I)


def _value(text: str) -> int | bool | str | None:
    text = text.strip()
    if text in ("n/a", ""):
        return None
    if text in ("on", "off"):
        return text == "on"
    try:
        return int(text)
    except ValueError:
        return text


def _two_blocks(text: str, labels: dict[str, str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {"max": {}, "current": {}}
    block: str | None = None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("Pre-set maximums"):
            block = "max"
        elif s.startswith("Current hardware settings"):
            block = "current"
        elif block and ":" in s:
            label, val = s.split(":", 1)
            if label.strip() in labels:
                out[block][labels[label.strip()]] = _value(val)
    return out


def parse_channels(text: str) -> dict[str, dict[str, Any]]:
    """Parse ``ethtool -l``: {"max": {rx, tx, other, combined}, "current": {...}}; n/a = None."""
    return _two_blocks(text, _CHANNEL_LABELS)


def parse_rings(text: str) -> dict[str, dict[str, Any]]:
    """Parse ``ethtool -g`` into max and current ring sizes, tx-push and tcp-data-split.

    tcp-data-split is True/False, or the string "unknown" when the driver does not say;
    a key is absent when the driver (or this ethtool) does not report it at all.
    """
    return _two_blocks(text, _RING_LABELS)


def parse_coalesce(text: str) -> dict[str, int | bool | None]:
    """Parse ``ethtool -c`` into {adaptive-rx, adaptive-tx, rx-usecs, ...}; n/a = None."""
    out: dict[str, int | bool | None] = {}
    for line in text.splitlines():
        s = line.strip()
        m = _PAIR.match(s)
        if m:
            prefix = "adaptive" if m.group(1).lower() == "adaptive" else "cqe-mode"
            for side, val in (("rx", m.group(2)), ("tx", m.group(3))):
                v = _value(val)
                out[f"{prefix}-{side}"] = v if isinstance(v, bool) else None
            continue
        if ":" not in s or s.startswith("Coalesce parameters"):
            continue
        key, val = s.split(":", 1)
        key = key.strip().replace("-frame-", "-frames-")  # ethtool prints rx-frame-low
        if re.match(r"^[a-z][a-z0-9-]*$", key):
            v = _value(val)
            out[key] = v if not isinstance(v, str) else None
    return out


def parse_indirection(text: str) -> list[int]:
    """Parse the indirection table of ``ethtool -x`` into a list of queue numbers."""
    table: list[int] = []
    in_table = False
    for line in text.splitlines():
        if "indirection table" in line:
            in_table = True
            continue
        if not in_table:
            continue
        m = re.match(r"^\s*\d+:\s+((?:\d+\s*)+)$", line)
        if m:
            table += [int(x) for x in m.group(1).split()]
        elif line.strip():
            break
    return table


def ethtool_args(d: dict[str, Any]) -> str:
    return " ".join(f"{k} {netif.onoff(v) if isinstance(v, bool) else v}" for k, v in d.items())
