"""Sharing a rack safely, without a stack (issue 39, items 4-7): names and paths with control
characters refused, devices in use refused from captured lsblk/blkid/holders/swaps outputs,
system folders and folders tierbench does not own refused before root uses them, and the
per-node run lock (held, stale, released)."""

from __future__ import annotations

import copy
import re
from typing import Annotated, Any

import pytest

from tierbench.config.errors import ConfigError
from tierbench.config.models import Model, safe_name, text, validate
from tierbench.kinds import registry
from tierbench.modes.model import ModeFile
from tierbench.placement.clusterfile import ClusterError, parse_cluster

CLUSTER: dict[str, Any] = {
    "version": 1,
    "nodes": [{"name": "node1", "address": "198.18.16.11",
               "interfaces": [{"name": "eth0", "address": "198.18.16.11/24"}]}],
    "roles": {"loadgen": "node1", "proxy": "node1", "web": "node1"},
}


def cluster_problems(**change: Any) -> list[str]:
    data = copy.deepcopy(CLUSTER)
    node = change.pop("node", {})
    data["nodes"][0].update(node)
    data.update(change)
    try:
        parse_cluster(data, registry.roles(), "c.yml")
    except ClusterError as exc:
        return exc.problems
    return []


# --------------------------------------------------------------------------- strict names


@pytest.mark.parametrize(("change", "sentence"), [
    ({"workdir": "/\n"}, "c.yml: workdir: '/\\n' holds a control character ('\\n' at position "
     "1); names and paths may not"),
    ({"workdir": "/srv/tb\n"}, "c.yml: workdir: '/srv/tb\\n' holds a control character ('\\n' "
     "at position 7); names and paths may not"),
    ({"node": {"name": "node1\n"}}, "c.yml: nodes[0].name: 'node1\\n' holds a control "
     "character ('\\n' at position 5); names and paths may not"),
    ({"node": {"user": "root\n"}}, "c.yml: nodes[0].user: 'root\\n' holds a control character "
     "('\\n' at position 4); names and paths may not"),
    ({"node": {"address": "n1.example.org\n"}}, "c.yml: nodes[0].address: 'n1.example.org\\n' "
     "holds a control character ('\\n' at position 14); names and paths may not"),
    ({"node": {"context": "ctx\x1b"}}, "c.yml: nodes[0].context: 'ctx\\x1b' holds a control "
     "character ('\\x1b' at position 3); names and paths may not"),
    ({"ssh_config": "ssh\tconfig"}, "c.yml: ssh_config: 'ssh\\tconfig' holds a control "
     "character ('\\t' at position 3); names and paths may not"),
], ids=["workdir-root", "workdir", "node", "user", "address", "context", "ssh_config"])
def test_a_cluster_file_name_or_path_with_a_control_character_is_refused(
        change: dict[str, Any], sentence: str) -> None:
    assert cluster_problems(**change) == [sentence]


def test_an_interface_name_with_a_trailing_newline_is_refused() -> None:
    itf = [{"name": "eth0\n", "address": "198.18.16.11/24"}]
    assert cluster_problems(node={"interfaces": itf}) == [
        "c.yml: nodes[0].interfaces[0].name: 'eth0\\n' holds a control character ('\\n' at "
        "position 4); names and paths may not"]


class Named(Model):
    name: Annotated[str, safe_name("dc-single")]
    kind: Annotated[str, text(r"^[a-z][a-z0-9-]*$", "web")] = "web"
    log: Annotated[str, text(example="wc_day46_1.gz")] = "x.gz"


@pytest.mark.parametrize(("data", "sentence"), [
    ({"name": "dc-single\n"}, "e.yml: name: holds a control character ('\\n' at position 9); "
     "names and paths may not, got 'dc-single\\n'"),
    ({"name": "ok", "kind": "web\n"}, "e.yml: kind: holds a control character ('\\n' at "
     "position 3); names and paths may not, got 'web\\n'"),
    ({"name": "ok", "log": "day\r46.gz"}, "e.yml: log: holds a control character ('\\r' at "
     "position 3); names and paths may not, got 'day\\r46.gz'"),
], ids=["safe_name", "pattern", "free-text"])
def test_an_experiment_value_with_a_control_character_is_refused(
        data: dict[str, Any], sentence: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate(Named, data, "e.yml")
    assert str(info.value) == sentence


def test_a_mode_file_with_a_newline_in_a_name_is_refused() -> None:
    for data, key in (({"tiers": ["proxy\n"]}, "tiers[0]"),
                      ({"extends": "offloads-on\n"}, "extends[0]"),
                      ({"host_interfaces": ["eth0\n"]}, "host_interfaces[0]"),
                      ({"sysctls": {"net.core.rmem_max\n": 1}}, "sysctls.'net.core.rmem_max\\n'")):
        with pytest.raises(ConfigError, match="^" + re.escape(f"m.yml: {key}: ")):
            validate(ModeFile, data, "m.yml")
