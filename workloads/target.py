"""The target guard shared by the control program and the Locust workers: load goes only to the
testbed's own services (Compose service names, or addresses in the benchmarking range its
networks use, 198.18.0.0/15, RFC 2544) unless the experiment explicitly allows another target.
Workers on other nodes apply it too: the target reaches them from the master."""

import ipaddress
from urllib.parse import urlsplit

OWN_HOSTS = ("proxy", "web")
OWN_NETWORK = ipaddress.ip_network("198.18.0.0/15")


def refusal(target: str, allow_foreign: bool) -> str | None:
    """Why this target is refused (one sentence), or None when load may go there."""
    parts = urlsplit(target)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"target {target!r} is not an http:// URL with a host name"
    if allow_foreign:
        return None
    host = parts.hostname
    if host in OWN_HOSTS:
        return None
    try:
        if ipaddress.ip_address(host) in OWN_NETWORK:
            return None
    except ValueError:
        pass
    return (f"refusing to send load to {host}: only the testbed's own services "
            f"({', '.join(OWN_HOSTS)} or addresses in {OWN_NETWORK}) are targets "
            "unless the experiment sets allow_foreign_target: true")
