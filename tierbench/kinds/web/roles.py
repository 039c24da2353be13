"""What the web stack declares to the placement: the cluster file's roles its services run on,
the CPU lists its compose files pin them to, and the services that admit only their peers."""

from __future__ import annotations

from tierbench.placement.access import Admission
from tierbench.placement.clusterfile import Role

ROLES = (
    Role("loadgen", "the load generator: wrk, or the Locust master"),
    Role("proxy", "the proxy tier (Apache mod_proxy or HAProxy)", server=True),
    # the web servers (stack.web_servers: 3) go round its nodes
    Role("web", "the web tier (Apache httpd)", nodes="one_or_more", server=True),
    Role("app", "the application tier", server=True),
    Role("db", "the database tier", server=True),
    Role("loadgen_workers", "Locust worker nodes", nodes="list"),
)

# The CPU-list variables the stack's compose files read (.env), with their defaults.
CPUSETS = {"LOADGEN_CPUS": "0", "PROXY_CPUS": "1", "WEB_CPUS": "1", "WORKER_CPUS": "0",
           "APP_CPUS": "1", "DB_CPUS": "1"}

ADMISSIONS = (
    # the web tier forwards /dyn/ to the application tier; with three web servers each has its
    # own application server (compose/web-servers-app.yml: web2 -> app2, web3 -> app3)
    Admission("app", "APP_CLIENTS", ("web",), ("web",), "PHP-FPM's listen.allowed_clients"),
    # (app2 and app3 run on one host only: no cluster roles)
    Admission("app2", "APP2_CLIENTS", ("web2",), (), "PHP-FPM's listen.allowed_clients"),
    Admission("app3", "APP3_CLIENTS", ("web3",), (), "PHP-FPM's listen.allowed_clients"),
    # the application tier queries the database; the seed job runs on the db node
    Admission("db", "DB_CLIENTS", ("app", "app2", "app3", "db-seed"), ("app", "db"),
              "PostgreSQL's pg_hba.conf, one line per address"),
)
