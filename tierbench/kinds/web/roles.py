"""What the web stack declares to the placement: the cluster file's roles its services run on
(the OrangeFS tier's too, tiers/orangefs.py), the CPU lists its compose files pin them to, and
the services that admit only their peers."""

from __future__ import annotations

from tierbench.placement.model import Admission, Role
from tierbench.tiers import orangefs

ROLES = (
    Role("loadgen", "the load generator: wrk, or the Locust master"),
    # the proxies (stack.proxies: 4) go round its nodes, each at its own port (80 to 83)
    Role("proxy", "the proxy tier (Apache mod_proxy or HAProxy)", nodes="one_or_more",
         server=True),
    # the web servers (stack.web_servers: 3) go round its nodes
    Role("web", "the web tier (Apache httpd)", nodes="one_or_more", server=True),
    # the application servers (one per web server: app, app2, app3) go round its nodes, each
    # at its own port (9000 to 9002): a list lets each sit on its web server's node, as 004's
    # data center paired a web and an application server per machine
    Role("app", "the application tier", nodes="one_or_more", server=True),
    Role("db", "the database tier", server=True),
    Role("loadgen_workers", "Locust worker nodes", nodes="list"),
    *orangefs.ROLES,  # a docroot on OrangeFS
)

# The CPU-list variables the stack's compose files read (.env), with their defaults.
CPUSETS = {"LOADGEN_CPUS": "0", "PROXY_CPUS": "1", "WEB_CPUS": "1", "WORKER_CPUS": "0",
           "APP_CPUS": "1", "DB_CPUS": "1"}

ADMISSIONS = (
    # the web tier forwards /dyn/ to the application tier; with three web servers each has its
    # own application server (compose/web-servers-app.yml: web2 -> app2, web3 -> app3), which
    # on a cluster admits only the node its web server runs on (access.cluster_admitted)
    Admission("app", "APP_CLIENTS", ("web",), ("web",), "PHP-FPM's listen.allowed_clients"),
    Admission("app2", "APP2_CLIENTS", ("web2",), ("web",), "PHP-FPM's listen.allowed_clients"),
    Admission("app3", "APP3_CLIENTS", ("web3",), ("web",), "PHP-FPM's listen.allowed_clients"),
    # the application servers query the database; the seed job runs on the db node
    Admission("db", "DB_CLIENTS", ("app", "app2", "app3", "db-seed"), ("app", "db"),
              "PostgreSQL's pg_hba.conf, one line per address"),
)
