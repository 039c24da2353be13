"""Faked kernels for the mode tests that run no command: a cluster node as the commands tierbench
sends it see it (FakeNode: host routes and sysctls, /proc/sys read-only as a lab node's; patched in
at ``netif.run_ns``), and a node or host with veth-like interfaces and writable sysctls
(FakeKernel: features, MTU, channels, RPS/XPS queues, the root qdisc; patched in at
``Transport.run``/``run_batch``, so that every command a mode sends is one round trip counted in
``Commands``: on a cluster each is an SSH connection)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tierbench import transport
from tierbench.interfaces import netif, qdisc, queues
from tierbench.interfaces.netif import NetifError
from tierbench.modes import congctl, sysctls
from tierbench.modes.model import Mode

DATA = Path(__file__).parent / "data" / "ethtool"


class FakeNode:
    """A cluster node as the commands tierbench sends it see it: a main routing table of host
    routes, sysctls, and a /proc/sys that is read-only (a lab node: writes are refused)."""

    def __init__(self, name: str, own: str, routes: dict[str, str], readonly: bool = True):
        self.name, self.own, self.routes, self.readonly = name, own, dict(routes), readonly
        self.sysctls = {"net.ipv4.tcp_congestion_control": "bbr",
                        "net.ipv4.tcp_available_congestion_control": "reno bbr cubic",
                        "net.ipv4.tcp_rmem": "4096 131072 6291456"}
        self.missing: set[str] = set()  # keys this kernel lacks
        self.commands: list[list[str]] = []

    def run(self, argv: list[str]) -> str:
        if argv[:2] != ["sh", "-c"]:
            return self.one(argv)
        if "test -e" in argv[2]:  # sysctls' probe of where a key is
            return self.probe(argv[2])
        lex = shlex.shlex(argv[2], posix=True, punctuation_chars=";&")
        out, cmd = "", []
        for token in [*lex, ";"]:
            if token in (";", "&&"):
                out += self.one(cmd) if cmd else ""
                cmd = []
            else:
                cmd.append(token)
        return out

    def probe(self, script: str) -> str:
        """sysctls' probe of where keys are: per key its state ("host", "readonly", "missing"),
        after the key when the script names it (several keys in one probe)."""
        out = []
        for path, named in re.findall(r"test -e (\S+); then echo (\S+ )?missing", script):
            key = path.strip("'").removeprefix("/proc/sys/").replace("/", ".")
            state = ("missing" if key in self.missing else "readonly" if self.readonly
                     else "host")
            out.append(f"{named}{state}\n")
        return "".join(out)

    def one(self, argv: list[str]) -> str:
        self.commands.append(argv)
        if argv[0] == "echo":
            return " ".join(argv[1:]) + "\n"
        if argv[0] == "true":
            return ""
        if argv[:2] == ["sysctl", "-n"]:
            for k in argv[2:]:
                if k in self.missing:
                    raise NetifError(f"node:{self.name}: `{' '.join(argv)}` failed (exit 255): "
                                     f"sysctl: cannot stat {sysctls.sysctl_path(k)}: No such "
                                     "file or directory")
            return "".join(self.sysctls[k] + "\n" for k in argv[2:])
        if argv[:2] == ["sysctl", "-e"]:
            return "".join(f"{k} = {self.sysctls[k]}\n" for k in argv[2:]
                           if k not in self.missing)
        if argv[0] == "sysctl":
            if self.readonly:
                raise NetifError(f"node:{self.name}: `{' '.join(argv)}` failed (exit 1): "
                                 "sysctl: permission denied on key")
            for kv in argv[3:]:
                key, value = kv.split("=", 1)
                self.sysctls[key] = " ".join(value.split())
            return ""
        assert argv[0] == "ip" and argv[1] in ("-4", "-6"), argv
        words = argv[2:]
        if words[:2] == ["-j", "route"]:  # route get PEER
            return json.dumps([{"dst": words[3], "dev": "eth0", "prefsrc": self.own,
                                "flags": []}]) + "\n"
        verb, rest = words[1], words[2:]
        if verb == "show":  # table main exact PEER/32
            line = self.routes.get(rest[-1].removesuffix("/32"))
            return line + "\n" if line else ""
        dst = rest[0].removesuffix("/32")
        if verb == "del":
            assert rest[1:] == ["proto", congctl.PROTO]
            if dst in self.routes and f"proto {congctl.PROTO}" in self.routes[dst]:
                del self.routes[dst]
            return ""
        assert verb == "replace", argv
        self.routes[dst] = " ".join([dst, *rest[1:]])
        return ""


class Fail(Exception):
    """A faked command that exits non-zero: its exit code and what it printed on stderr."""

    def __init__(self, code: int, stderr: str) -> None:
        super().__init__(stderr)
        self.code, self.stderr = code, stderr


@dataclass
class Iface:
    """A veth as its kernel shows it (features from tests/data/ethtool/veth-default.txt)."""

    ifindex: int
    mtu: int = 1500
    features: dict[str, dict] = field(default_factory=lambda: netif.parse_features(
        (DATA / "veth-default.txt").read_text()))
    channels: dict[str, int] = field(default_factory=lambda: {"rx": 1, "tx": 1})
    root: dict[str, str] = field(default_factory=lambda: {"kind": "noqueue", "handle": "0:"})
    queues: dict[str, dict[str, str]] = field(default_factory=lambda: {
        "rx-0": {"rps_cpus": "0", "rps_flow_cnt": "0"}, "tx-0": {"xps_cpus": "0"}})
    refuses: set[str] = field(default_factory=set)  # features `ethtool -K` leaves as they are
    refuse_exits: bool = False  # and then fails (exit 1) rather than saying nothing

    def features_text(self, ifname: str) -> str:
        lines = [f"Features for {ifname}:"]
        for name, f in self.features.items():
            state = "on" if f["on"] else "off"
            lines.append(("\t" if f["parent"] else "") + f"{name}: {state}"
                         + (" [fixed]" if f["fixed"] else ""))
        return "\n".join(lines) + "\n"

    def set_feature(self, name: str, on: bool) -> None:
        name = netif.FEATURE_ALIASES.get(name, name)
        if name not in self.features:
            raise Fail(1, f"ethtool: bad command line argument(s)\nno feature {name}")
        kids = [k for k, f in self.features.items() if f["parent"] == name]
        for n in kids or [name]:
            f = self.features[n]
            if not f["fixed"] and n not in self.refuses and name not in self.refuses:
                f["on"] = on
            elif self.refuse_exits and f["on"] != on and not f["fixed"]:
                raise Fail(1, "Could not change any device features")
        for parent in {f["parent"] for f in self.features.values() if f["parent"]}:
            self.features[parent]["on"] = any(
                f["on"] for f in self.features.values() if f["parent"] == parent)


class FakeKernel(FakeNode):
    """A node (or this host) with veth-like interfaces and writable sysctls, for a whole mode's
    commands: ``ip link``, ``ethtool -k/-K/-i/-l/-L`` (-c, -g and -x refused as veth does),
    ``tc``, the RPS/XPS queue scripts, ``sysctl``, the host routes of FakeNode."""

    def __init__(self, name: str, own: str, ifnames: Sequence[str] = ("eth0",)) -> None:
        super().__init__(name, own, {}, readonly=False)
        self.sysctls.update({"net.ipv4.tcp_wmem": "4096 16384 4194304",
                             "net.ipv4.tcp_allowed_congestion_control": "reno bbr",
                             "net.core.rmem_max": "212992", "net.core.wmem_max": "212992",
                             "net.core.busy_poll": "0", "net.core.busy_read": "0",
                             "net.core.rps_sock_flow_entries": "0",
                             "net.core.somaxconn": "4096"})
        self.ifaces = {n: Iface(ifindex=2 + i) for i, n in enumerate(ifnames)}

    def complete(self, argv: list[str]) -> subprocess.CompletedProcess:
        """What the command does here, as a finished process."""
        try:
            return subprocess.CompletedProcess(argv, 0, self.run(argv), "")
        except Fail as exc:
            return subprocess.CompletedProcess(argv, exc.code, "", exc.stderr)
        except NetifError as exc:
            return subprocess.CompletedProcess(argv, 1, "", str(exc))

    def iface(self, name: str) -> Iface:
        if name not in self.ifaces:
            raise Fail(1, f'Device "{name}" does not exist.')
        return self.ifaces[name]

    def run(self, argv: list[str]) -> str:
        if argv[:3] == ["unshare", "-m", "--"]:  # the queues' scripts in a namespace
            argv = ["sh", "-c", argv[4].split(" && ", 1)[1]]
        if argv[0] == "unshare":  # the qdisc probe, on a throw-away veth
            return ""
        if argv[:2] == ["sh", "-c"] and "/queues" in argv[2]:
            return self.queue_script(argv[2])
        return super().run(argv)

    def queue_script(self, script: str) -> str:
        found = re.search(r"/sys/class/net/([^/]+)/queues", script)
        assert found, script
        qs = self.iface(found.group(1)).queues
        if "for q in" in script:
            return "".join(f"{q} {f} {v}\n" for q, files in qs.items() for f, v in files.items())
        for value, q, f in re.findall(r"echo (\S+) > \S*/queues/([^/]+)/(\w+)", script):
            qs[q][f] = value.strip("'")
        return ""

    def one(self, argv: list[str]) -> str:
        if argv[0] == "ethtool":
            return self.ethtool(argv[1], argv[2], argv[3:])
        if argv[:2] == ["cat", "/sys/devices/system/cpu/online"]:
            return "0-1\n"
        if argv[0] == "tc":
            self.commands.append(argv)
            return self.tc(argv[1:])
        if argv[:2] == ["ip", "-d"]:  # -j link show dev IF
            self.commands.append(argv)
            i = self.iface(argv[-1])
            return json.dumps([{"ifindex": i.ifindex, "ifname": argv[-1], "mtu": i.mtu,
                                "min_mtu": 68, "max_mtu": 65535,
                                "linkinfo": {"info_kind": "veth"}}])
        if argv[:3] == ["ip", "link", "set"]:  # dev IF mtu N
            self.commands.append(argv)
            self.iface(argv[4]).mtu = int(argv[6])
            return ""
        return super().one(argv)

    def ethtool(self, option: str, ifname: str, args: list[str]) -> str:
        self.commands.append(["ethtool", option, ifname, *args])
        i = self.iface(ifname)
        if option == "-k":
            return i.features_text(ifname)
        if option == "-K":
            for name, value in zip(args[::2], args[1::2]):
                i.set_feature(name, value == "on")
            return ""
        if option == "-i":
            return "driver: veth\nversion: 1.0\nbus-info: \n"
        if option == "-l":
            return (f"Channel parameters for {ifname}:\nPre-set maximums:\nRX:\t\t2\nTX:\t\t2\n"
                    f"Other:\t\tn/a\nCombined:\tn/a\nCurrent hardware settings:\n"
                    f"RX:\t\t{i.channels['rx']}\nTX:\t\t{i.channels['tx']}\nOther:\t\tn/a\n"
                    "Combined:\tn/a\n")
        if option == "-L":
            for key, value in zip(args[::2], args[1::2]):
                i.channels[key] = int(value)
            return ""
        raise Fail(1, "netlink error: Operation not supported")

    def tc(self, words: list[str]) -> str:
        if words[:2] == ["-j", "qdisc"]:
            i = self.iface(words[-1])
            return json.dumps([{"kind": i.root["kind"], "handle": i.root["handle"],
                                "root": True}])
        if words[:2] == ["qdisc", "show"]:
            i = self.iface(words[-1])
            return f"qdisc {i.root['kind']} {i.root['handle']} root refcnt 2\n"
        if words[:2] == ["qdisc", "replace"]:  # dev IF root handle 1: KIND ...
            self.iface(words[3]).root = {"kind": words[7], "handle": words[6]}
        elif words[:2] == ["qdisc", "del"]:
            self.iface(words[3]).root = {"kind": "noqueue", "handle": "0:"}
        return ""


@dataclass
class Commands:
    """The round trips a test's code made: per call, where it went and the argvs it carried
    (one for a command, several for a batch)."""

    calls: list[tuple[str | None, list[list[str]]]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.calls)

    def clear(self) -> None:
        self.calls.clear()


def clear_caches() -> None:
    """The probes' caches (they would hide the commands of a first point)."""
    for fn in (getattr(sysctls, "sysctl_on_node", None), qdisc.probe_qdisc,
               queues.online_cpu_mask):
        if fn is not None and hasattr(fn, "cache_clear"):
            fn.cache_clear()
    if hasattr(sysctls, "clear_probes"):
        sysctls.clear_probes()


def install(monkeypatch: pytest.MonkeyPatch, kernels: dict[str | None, FakeKernel]) -> Commands:
    """Every command sent through a Transport goes to the kernel of its node instead; returns
    the count of round trips."""
    seen = Commands()

    def argv_of(command: transport.Command) -> list[str]:
        return ["sh", "-c", command] if isinstance(command, str) else list(command)

    def run(self: transport.Transport, command: transport.Command, *, netns: int | None = None,
            **_: object) -> subprocess.CompletedProcess:
        seen.calls.append((self.name, [argv_of(command)]))
        return kernels[self.name].complete(argv_of(command))

    def run_batch(self: transport.Transport, commands: Sequence[Sequence[str]], *,
                  netns: int | None = None, **_: object) -> list[subprocess.CompletedProcess]:
        seen.calls.append((self.name, [list(c) for c in commands]))
        return [kernels[self.name].complete(list(c)) for c in commands]

    monkeypatch.setattr(transport.Transport, "run", run)
    monkeypatch.setattr(transport.Transport, "run_batch", run_batch, raising=False)
    clear_caches()
    return seen


def two_nodes(monkeypatch: pytest.MonkeyPatch
              ) -> tuple[dict[str | None, FakeKernel], list[netif.Endpoint], Commands]:
    """Two cluster nodes faked (node1 the web tier's, node2 the proxy's, each an eth0 on the
    data plane 198.18.16.0/24) and their endpoints, every command counted."""
    kernels: dict[str | None, FakeKernel] = {
        f"node{i}": FakeKernel(f"node{i}", f"198.18.16.{10 + i}") for i in (1, 2)}
    eps = [netif.Endpoint(tier, "eth0", None, transport.Transport(n, ("ssh", n)),
                          (f"198.18.16.{13 - int(n[-1])}",))
           for tier, n in (("web", "node1"), ("proxy", "node2"))]
    return kernels, eps, install(monkeypatch, kernels)


def one_point(mode: Mode, eps: list[netif.Endpoint], folder: Path) -> dict:
    """A point's mode applied and restored as the runner does (apply.mode_applied, no settle
    time, no rollback guard); its manifest record."""
    from tierbench.modes import apply

    record: dict = {}
    with apply.mode_applied(mode, eps, eps, netif.StateFile(folder / "state.json"), record, 0,
                            lambda: None):
        pass
    return record


def main() -> None:
    """Print the round trips of one point (first and later: the probes are cached) for every
    shipped mode without cpu: on two faked nodes: `PYTHONPATH=.:tests python tests/fake_kernel.py`."""
    import tempfile

    from tierbench.modes import model

    names = sorted(p.stem for p in model.MODES_DIR.glob("*.yml"))
    total = [0, 0]
    for name in names:
        mode = model.load_mode(name)
        if mode.cpu:
            continue
        counts, status = [], "ok"
        with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory() as tmp:
            _, eps, seen = two_nodes(mp)
            for _ in range(2):
                seen.clear()
                try:
                    one_point(mode, eps, Path(tmp))
                except NetifError as exc:
                    status = "refused" if "cannot be applied" in str(exc) else f"error: {exc}"
                counts.append(len(seen))
        total = [total[0] + counts[0], total[1] + counts[1]]
        print(f"{name:28} {counts[0]:4} {counts[1]:4}  {status[:100]}")
    print(f"{'total':28} {total[0]:4} {total[1]:4}")


if __name__ == "__main__":
    main()
