"""The network tier (compose/net.yml): K senders and N receivers brought up for a deployment
(receivers sharing one node's ports PORT_STRIDE apart), found wherever they run, and a receiver
that stopped during a point."""

from __future__ import annotations

import os
from collections.abc import Hashable
from dataclasses import dataclass

from tierbench.config.files import ROOT, dotenv
from tierbench.kinds.contract import CLIENT, SERVER, Deployment, Tier, log
from tierbench.kinds.net import tools
from tierbench.kinds.net.dmacopy import CopyPlan
from tierbench.kinds.net.flows import (PORT_STRIDE, PORTS_PER_RECEIVER, iperf3_servers,
                                       iperf_servers)
from tierbench.kinds.net.settings import Net
from tierbench.measure.sampler import CgroupCpu, CgroupGroup
from tierbench.placement import model, placer

SENDER, RECEIVER = "net-client", "net-server"
TIERS = (SENDER, RECEIVER)
IMAGE = "tierbench-net"
OVERLAY = "compose/net.yml"  # the network micro-benchmark tier (profile net)


@dataclass
class NetInfo:
    """The network tier's own handles: its sender and receiver containers, the receivers'
    addresses and port shifts (receivers sharing one node's ports, PORT_STRIDE apart), and the
    iperf 2 servers each receiver runs."""

    senders: list[model.Container]
    receivers: list[model.Container]
    addresses: list[str]
    shift: list[int]
    ports: int = PORTS_PER_RECEIVER
    copies: CopyPlan | None = None  # NET-dmacopy: the pools and the DMA engine (kind.prepare)


def deploy(where: placer.Placer, n: Net, receivers: int, clients: int) -> Deployment[NetInfo]:
    """compose/net.yml up: the senders and the receivers (the web stack goes first)."""
    ports = iperf_servers(n, receivers, clients)
    ports3 = iperf3_servers(n, receivers, clients)
    log(f"tierbench: bringing the network tier up on {where.name} ({clients} sender(s), "
        f"{receivers} receiver(s), {ports} iperf and {ports3} iperf3 servers each)")
    if where.shares_ports() and receivers > 1 and \
            max(ports + tools.IPERF3_PORT - tools.IPERF_PORT, ports3) > PORT_STRIDE - 200:
        raise model.StackError(f"{receivers} receivers on one node's ports need at most "
                                 f"{PORT_STRIDE - 200} iperf3 servers each, this point "
                                 f"{ports3}: use one receiver per node")
    where.down()
    env = {**dotenv(), **os.environ, "NET_IPERF_SERVERS": str(ports),
           "NET_IPERF3_SERVERS": str(ports3), "NET_SOCKPERF_SERVERS": str(clients)}
    where.up(model.Services(net_files(), env, services=[RECEIVER, SENDER],
                              scale={RECEIVER: receivers, SENDER: clients},
                              replica_env={RECEIVER: receiver_env(receivers, ports, ports3,
                                                                   clients)},
                              timeout=300))
    deployment = discover(where, receivers, clients)
    deployment.info.ports = ports
    return deployment


def deploy_sender(where: placer.Placer, key: Hashable) -> Deployment[NetInfo]:
    """compose/net.yml up with one sender and no receiver (NET-dmacopy copies in it); the
    deployment keeps the point's key."""
    log(f"tierbench: bringing one sender of the network tier up on {where.name} (no receiver)")
    where.down()
    env = {**dotenv(), **os.environ}
    # the receivers scaled to none: the sender's dependency on them is then not started
    where.up(model.Services(net_files(), env, services=[SENDER],
                              scale={RECEIVER: 0, SENDER: 1}, timeout=300))
    deployment = discover(where, 0, 1)
    deployment.key = key
    return deployment


def running(where: placer.Placer) -> Deployment[NetInfo] | None:
    """The network tier, when it is up (a sender without receivers: NET-dmacopy's)."""
    found = [c for c in where.replicas() if c.service in TIERS]
    receivers = sum(1 for c in found if c.service == RECEIVER)
    clients = sum(1 for c in found if c.service == SENDER)
    return discover(where, receivers, clients) if clients else None


def net_files() -> list[str]:
    """The network tier's compose files (the base file names the project's networks)."""
    return [str(ROOT / "docker-compose.yml"), str(ROOT / OVERLAY)]


def receiver_env(receivers: int, ports: int, ports3: int, clients: int) -> list[dict[str, str]]:
    """Each receiver's ports when receivers share one host's (PORT_STRIDE apart)."""
    return [{"NET_IPERF_PORT": str(tools.IPERF_PORT + i * PORT_STRIDE),
             "NET_IPERF3_PORT": str(tools.IPERF3_PORT + i * PORT_STRIDE),
             "NET_SOCKPERF_PORT": str(tools.SOCKPERF_PORT + i * PORT_STRIDE),
             "NET_IPERF_SERVERS": str(ports), "NET_IPERF3_SERVERS": str(ports3),
             "NET_SOCKPERF_SERVERS": str(clients)} for i in range(receivers)]


def discover(where: placer.Placer, receivers: int, clients: int = 1) -> Deployment[NetInfo]:
    """The running network tier wherever it runs: senders and receivers, their CPU counters
    and interfaces."""
    found = [c for c in where.replicas() if c.service in TIERS]
    senders = [c for c in found if c.service == SENDER]
    servers = [c for c in found if c.service == RECEIVER]
    if len(senders) != clients or len(servers) != receivers:
        raise model.StackError(f"the network tier is not up as asked ({clients} sender(s), "
                               f"{receivers} receiver(s); found {len(senders)} and "
                               f"{len(servers)}): see `docker compose -f docker-compose.yml "
                               "-f compose/net.yml logs`")
    tiers = {}
    cpus: dict[str, CgroupCpu | CgroupGroup] = {}
    for service, role, group in ((SENDER, CLIENT, senders), (RECEIVER, SERVER, servers)):
        if not group:
            continue  # no receiver (NET-dmacopy)
        eps, parts = [], {}
        for i, c in enumerate(group, 1):
            label = f"{service}-{i}" if len(group) > 1 else service
            eps += where.endpoints(label, c)
            parts[label] = where.counter(c)
        tiers[service] = Tier(service, role, eps, group)
        cpus[service] = CgroupGroup(parts) if len(group) > 1 else parts[service]
    addresses = [where.address(c, "198.18.4.") for c in servers]
    shift = [i * PORT_STRIDE if where.shares_ports() else 0 for i in range(len(servers))]
    ifaces = where.ifaces([ep for t in tiers.values() for ep in t.endpoints])
    return Deployment((receivers, clients), tiers, cpus, ifaces,
                      containers={SENDER: senders[0],
                                  **({RECEIVER: servers[0]} if servers else {})},
                      info=NetInfo(senders, servers, addresses, shift), placer=where)
