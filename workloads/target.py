"""The target guard shared by the control program and the Locust workers: load goes only to the
testbed's own services (Compose service names, addresses in the benchmarking range its
networks use, 198.18.0.0/15, RFC 2544, or on a cluster the nodes' data-plane addresses the
cluster file names) unless the experiment explicitly allows another target. Workers on other
nodes apply it too: the target reaches them from the master, the cluster's addresses in
OWN_ADDRESSES."""

import ipaddress
from urllib.parse import urlsplit

OWN_HOSTS = ("proxy", "proxy2", "proxy3", "proxy4", "web")  # proxy2..: stack.proxies
OWN_NETWORK = ipaddress.ip_network("198.18.0.0/15")


def refusal(target: str, allow_foreign: bool, own: tuple[str, ...] | list[str] = ()) -> str | None:
    """Why this target is refused (one sentence), or None when load may go there; ``own``: the
    addresses of the testbed's own nodes beyond the benchmarking range (a cluster's)."""
    parts = urlsplit(target)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"target {target!r} is not an http:// URL with a host name"
    if allow_foreign:
        return None
    host = parts.hostname
    if host in OWN_HOSTS or host in own:
        return None
    try:
        if ipaddress.ip_address(host) in OWN_NETWORK:
            return None
    except ValueError:
        pass
    return (f"refusing to send load to {host}: only the testbed's own services "
            f"({', '.join(OWN_HOSTS)} or addresses in {OWN_NETWORK}) are targets "
            "unless the experiment sets allow_foreign_target: true")
