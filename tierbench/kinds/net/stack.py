"""The network tier (compose/net.yml): K senders and N receivers brought up for a deployment
(receivers sharing one node's ports PORT_STRIDE apart), found wherever they run, and a receiver
that stopped during a point."""

from __future__ import annotations

import os
from collections.abc import Hashable

from tierbench.config.files import ROOT
from tierbench.kinds.contract import CLIENT, SERVER, Deployment, Tier, log
from tierbench.kinds.net import tools
from tierbench.kinds.net.flows import PORT_STRIDE, iperf3_servers, iperf_servers
from tierbench.kinds.net.settings import Net
from tierbench.measure.sampler import CgroupCpu, CgroupGroup
from tierbench.placement import compose, placer

SENDER, RECEIVER = "net-client", "net-server"
TIERS = (SENDER, RECEIVER)
IMAGE = "tierbench-net"


def deploy(n: Net, key: Hashable) -> Deployment:
    """compose/net.yml up: the senders and the receivers (the web stack goes first)."""
    receivers, clients = key  # type: ignore[misc]
    ports = iperf_servers(n, receivers, clients)
    ports3 = iperf3_servers(n, receivers, clients)
    where = placer.current()
    log(f"tierbench: bringing the network tier up on {where.name} ({clients} sender(s), "
        f"{receivers} receiver(s), {ports} iperf and {ports3} iperf3 servers each)")
    if where.shares_ports() and receivers > 1 and \
            max(ports + tools.IPERF3_PORT - tools.IPERF_PORT, ports3) > PORT_STRIDE - 200:
        raise compose.StackError(f"{receivers} receivers on one node's ports need at most "
                                 f"{PORT_STRIDE - 200} iperf3 servers each, this point "
                                 f"{ports3}: use one receiver per node")
    where.down()
    env = {**compose.dotenv(), **os.environ, "NET_IPERF_SERVERS": str(ports),
           "NET_IPERF3_SERVERS": str(ports3), "NET_SOCKPERF_SERVERS": str(clients)}
    where.up(compose.Services(net_files(), env, services=[RECEIVER, SENDER],
                              scale={RECEIVER: receivers, SENDER: clients},
                              replica_env={RECEIVER: receiver_env(receivers, ports, ports3,
                                                                   clients)},
                              timeout=300))
    deployment = discover(receivers, clients)
    deployment.info["ports"] = ports
    return deployment


def running() -> Deployment | None:
    """The network tier, when it is up."""
    found = [c for c in placer.current().replicas() if c.service in TIERS]
    receivers = sum(1 for c in found if c.service == RECEIVER)
    clients = sum(1 for c in found if c.service == SENDER)
    return discover(receivers, clients) if receivers and clients else None


def net_files() -> list[str]:
    """The network tier's compose files (the base file names the project's networks)."""
    return [str(ROOT / "docker-compose.yml"), str(ROOT / compose.NET_OVERLAY)]


def receiver_env(receivers: int, ports: int, ports3: int, clients: int) -> list[dict[str, str]]:
    """Each receiver's ports when receivers share one host's (PORT_STRIDE apart)."""
    return [{"NET_IPERF_PORT": str(tools.IPERF_PORT + i * PORT_STRIDE),
             "NET_IPERF3_PORT": str(tools.IPERF3_PORT + i * PORT_STRIDE),
             "NET_SOCKPERF_PORT": str(tools.SOCKPERF_PORT + i * PORT_STRIDE),
             "NET_IPERF_SERVERS": str(ports), "NET_IPERF3_SERVERS": str(ports3),
             "NET_SOCKPERF_SERVERS": str(clients)} for i in range(receivers)]


def discover(receivers: int, clients: int = 1) -> Deployment:
    """The running network tier wherever it runs: senders and receivers, their CPU counters
    and interfaces."""
    where = placer.current()
    found = [c for c in where.replicas() if c.service in TIERS]
    senders = [c for c in found if c.service == SENDER]
    servers = [c for c in found if c.service == RECEIVER]
    if len(senders) != clients or len(servers) != receivers:
        raise compose.StackError(f"the network tier is not up as asked ({clients} sender(s), "
                               f"{receivers} receiver(s); found {len(senders)} and "
                               f"{len(servers)}): see `docker compose -f docker-compose.yml "
                               "-f compose/net.yml logs`")
    tiers = {}
    cpus: dict[str, CgroupCpu | CgroupGroup] = {}
    for service, role, group in ((SENDER, CLIENT, senders), (RECEIVER, SERVER, servers)):
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
                      containers={SENDER: senders[0], RECEIVER: servers[0]},
                      info={"sender": senders[0], "senders": senders, "receivers": servers,
                            "addresses": addresses, "shift": shift}, placer=where)
