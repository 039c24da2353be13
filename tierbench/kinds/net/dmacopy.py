"""NET-dmacopy (000 §4.4): a DMA copy engine against memcpy, where the host has one; refused
with one sentence where it has none (or where the benchmark cannot run yet)."""

from __future__ import annotations

from pathlib import Path

from tierbench.config.errors import ConfigError


def dma_channels(root: Path = Path("/sys/class/dma")) -> list[tuple[str, str]]:
    """The host's dmaengine channels and their drivers (ioatdma, idxd, ...), e.g.
    [('dma0chan0', 'ioatdma')]."""
    out = []
    for chan in sorted(root.glob("dma*chan*")):
        driver = chan / "device" / "driver"
        out.append((chan.name, driver.resolve().name if driver.exists() else "unknown driver"))
    return out


def dmacopy_check(source: str, root: Path = Path("/sys/class/dma")) -> None:
    """NET-dmacopy runs only on a DMA copy engine; refuse with one sentence saying why not."""
    found = dma_channels(root)
    if not found:
        raise ConfigError(f"{source}: NET-dmacopy is unavailable on this host: it needs a DMA "
                          f"copy engine (an ioatdma or idxd channel in {root}) and there is "
                          "none; nothing was run")
    names = ", ".join(f"{c} ({d})" for c, d in found)
    raise ConfigError(f"{source}: NET-dmacopy found {names}, but its copy benchmark is not built "
                      "yet (it was written on a host without a copy engine, where it could not "
                      "be checked); nothing was run")
