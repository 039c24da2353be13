"""The `net:` block of a network experiment: the test and tool, receivers and senders, the
stream factors (connections, write size, direction, socket buffers) or the latency factor
(message size), the socket-option cases and the senders' profile; declared models with one
sentence per problem."""

from __future__ import annotations

from typing import Annotated

from pydantic import model_validator

from tierbench.config.models import (Model, choice, flag, non_empty_list, one_or_many, problem,
                                     text, whole)
from tierbench.kinds.net import tools

TESTS = ("stream", "latency", "dmacopy")
TOOLS = ("iperf2", "iperf3")
# iperf 2 runs a thread per connection: above this many in one point, on 2 cores, iperf 2.1.8
# servers and clients were seen to abort (double free, corrupted lists) and reset connections
IPERF2_MAX_CONNECTIONS = 1000
MAX_CONNECTIONS = 6000
MAX_CLIENTS = 8


class WindowAbove(Model):
    """001's window rule: above `connections` connections, every socket gets `window` bytes."""

    connections: Annotated[int, whole(1, MAX_CONNECTIONS)]
    window: Annotated[int, whole(4096)]


class Net(Model):
    """The `net:` block of a network experiment."""

    test: Annotated[str, choice(*TESTS)]
    tool: Annotated[str, choice(*TOOLS)] = "iperf2"
    # receivers (000's links: one receiver per port of the sender); a list is a factor
    receivers: Annotated[list[int], one_or_many(whole(1, 15), "whole number")] = [1]
    # senders (003's concurrent client hosts), each running the whole set of connections
    clients: Annotated[list[int], one_or_many(whole(1, MAX_CLIENTS), "whole number")] = [1]
    connections: Annotated[list[int], one_or_many(whole(1, MAX_CONNECTIONS), "whole number")] = [1]
    # connections (stream) or sessions (latency) per receiver (000 NET-bw: one connection per
    # link and direction; 003: one session from every client to each server)
    per_receiver: Annotated[bool, flag()] = False
    write_size: Annotated[list[int], one_or_many(whole(1, 16 * 1024 * 1024), "whole number")] = [131072]
    direction: Annotated[list[str], one_or_many(choice("uni", "bi"), "direction")] = ["uni"]
    window: Annotated[int, whole(4096)] | None = None
    window_above: WindowAbove | None = None
    # latency: bytes per message; dmacopy: bytes per copy
    message_size: Annotated[list[int], one_or_many(whole(tools.SOCKPERF_MIN_MESSAGE, 65536), "whole number")] = [64]
    cases: Annotated[list[str], non_empty_list(text(r"^[\w./-]+$", "sockopt-1-default"), "mode names")] | None = None
    profile: Annotated[bool, flag()] = False
    warmup_s: Annotated[int, whole(0, 60)] = 2
    measure_s: Annotated[int, whole(1, 600)] = 10

    @model_validator(mode="after")
    def _fits(self) -> Net:
        if self.test == "stream" and self.tool == "iperf2":
            most = max(total_connections(self, c, r) for c in self.connections
                       for r in self.receivers) * max(self.clients)
            if most > IPERF2_MAX_CONNECTIONS:
                raise problem("{most} connections at once are more than iperf 2 holds here "
                              "({limit}: a thread each, and iperf 2.1.8 was seen to crash "
                              "above that on 2 cores); set tool: iperf3",
                              sub="connections", most=most, limit=IPERF2_MAX_CONNECTIONS)
        if self.profile and self.test != "stream":
            raise problem("profiles the senders of a stream test; set test: stream",
                          sub="profile")
        if self.cases is not None and len(set(self.cases)) != len(self.cases):
            raise problem("lists a mode twice", sub="cases")
        return self


class NetSettings(Model):
    """The keys of a network experiment besides the common ones."""

    net: Net


def total_connections(n: Net, connections: int, receivers: int) -> int:
    """The connections of a point from one sender (per receiver when the experiment says so)."""
    return connections * receivers if n.per_receiver else connections


def window_for(n: Net, connections: int) -> int | None:
    """The socket buffer of a point's connections (None: the kernel's autotuning)."""
    if n.window_above is not None and connections > n.window_above.connections:
        return n.window_above.window
    return n.window

