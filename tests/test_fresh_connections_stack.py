"""Every web point starts with fresh proxy-to-web connections (kinds.web.steps,
FreshProxyConnections): the keep-alive connections a proxy (Apache, HAProxy) holds to the web
tier after a point are closed by its graceful restart, and it answers again on new ones. In
standalone tbe- containers on their own network (198.19.251.0/24), never the Compose project;
images tierbench-web, tierbench-proxy and tierbench-haproxy (TIERBENCH_TAG, default 0.1.0)."""

from __future__ import annotations

import http.client
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest

from tierbench import bench
from tierbench.kinds.web import steps
from tierbench.placement.local import LocalPlacer

pytestmark = pytest.mark.stack

NETWORK, SUBNET = "tbe-fc-net", "198.19.251.0/24"
WEB_IP, PROXY_IP = "198.19.251.11", "198.19.251.12"
TAG = os.environ.get("TIERBENCH_TAG", "0.1.0")
IMAGES = {"apache": f"tierbench-proxy:{TAG}", "haproxy": f"tierbench-haproxy:{TAG}"}


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120,
                          check=check)


def healthy(name: str) -> None:
    for _ in range(60):
        if docker("inspect", "-f", "{{.State.Health.Status}}", name).stdout.strip() == "healthy":
            return
        time.sleep(0.5)
    raise AssertionError(f"{name} did not become healthy in 30 s")


@contextmanager
def own_network() -> Iterator[None]:
    """The test's network, made unless it is there, and removed if it was made here."""
    made = docker("network", "inspect", NETWORK, check=False).returncode != 0
    if made:
        docker("network", "create", "--subnet", SUBNET, NETWORK)
    try:
        yield
    finally:
        if made:
            docker("network", "rm", NETWORK, check=False)


def through_proxy(n: int) -> list[int]:
    """n requests on one keep-alive connection through the proxy to the web tier (a page that
    is not there: 404 from the web server); their statuses."""
    conn = http.client.HTTPConnection(PROXY_IP, 80, timeout=10)
    out = []
    for _ in range(n):
        conn.request("GET", "/nothing-here")
        r = conn.getresponse()
        r.read()
        out.append(r.status)
    conn.close()
    return out


@pytest.mark.parametrize("proxy", ["apache", "haproxy"])
def test_a_graceful_restart_closes_the_proxys_connections_to_the_web_tier(proxy: str) -> None:
    tag = uuid.uuid4().hex[:6]
    web, front = f"tbe-fc-web-{tag}", f"tbe-fc-{proxy}-{tag}"
    with own_network():
        try:
            run_case(proxy, web, front)
        finally:
            docker("rm", "-f", web, front, check=False)


def run_case(proxy: str, web: str, front: str) -> None:
    """The web server and the proxy up, connections opened, the proxy restarted gracefully."""
    docker("run", "-d", "--name", web, "--network", NETWORK, "--ip", WEB_IP,
           f"tierbench-web:{TAG}")
    docker("run", "-d", "--name", front, "--network", NETWORK, "--ip", PROXY_IP,
           "-e", f"BACKEND={WEB_IP}:80", IMAGES[proxy])
    healthy(web)
    healthy(front)
    container = bench.container(front)
    where = LocalPlacer()
    assert set(through_proxy(20)) <= {200, 404}  # answered by the web server, through it
    before = steps.outbound(where.proc_net(container, ("tcp", "tcp6")))
    assert before, "the proxy kept no connection to the web tier open"
    record: dict[str, Any] = {}
    lines: list[str] = []
    ctx = SimpleNamespace(deployment=SimpleNamespace(
        placer=where, tiers={"proxy": SimpleNamespace(containers=[container])}),
        record=record, log=lines.append)
    steps.FreshProxyConnections(proxy).before(ctx)  # type: ignore[arg-type]
    assert record["proxy_connections"]["open_before"] == len(before)
    assert record["proxy_connections"]["left"] == 0 and not lines
    assert not before & steps.outbound(where.proc_net(container, ("tcp", "tcp6")))
    assert set(through_proxy(3)) <= {200, 404}  # it answers again, on new connections
    assert docker("inspect", "-f", "{{.State.Running}}", front).stdout.strip() == "true"
