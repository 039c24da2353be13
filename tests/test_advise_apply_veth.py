"""`tierbench advise apply` on a real veth pair (needs root): an advise run's confirmed
configuration set on this host's end, read back, kept when its peer answers, put back by the
revert script it wrote; not kept (and put back) when the reachability check fails.

Layout, created and removed here: netns ``tba-n`` holds ``tba-n0`` (198.19.252.2/30), its
peer ``tba-h0`` (198.19.252.1/30) is in the host's namespace; a TCP listener in ``tba-n``
(port 5299) is what the reachability check connects to. Traffic flows only between them. These tests FAIL (never skip) when the machine cannot run them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from netns_lab import require_environment, sh, stop

from tierbench import cli
from tierbench.advise import install
from tierbench.config.errors import TierbenchError
from tierbench.interfaces import netif

pytestmark = pytest.mark.netns

NS, H_IF, N_IF = "tba-n", "tba-h0", "tba-n0"
H_IP, N_IP, PORT = "198.19.252.1", "198.19.252.2", 5299
NOBODY = f"198.19.252.3:{PORT}"
LISTEN = ("import socket, sys\ns = socket.create_server((sys.argv[1], int(sys.argv[2])))\n"
          "print('up', flush=True)\nwhile True:\n    s.accept()[0].close()\n")
NIC = {"features": {"tcp-segmentation-offload": False, "generic-receive-offload": True}}
SHOWN = ("tcp-segmentation-offload", "generic-receive-offload")


def _cleanup() -> None:
    if sh("ip", "link", "show", "dev", H_IF, check=False).returncode == 0:
        sh("ip", "link", "del", "dev", H_IF, check=False)
    if Path(f"/run/netns/{NS}").exists():
        sh("ip", "netns", "del", NS, check=False)


@pytest.fixture
def pair() -> Iterator[None]:
    require_environment("test_advise_apply_veth", ("ip", "ethtool", "nsenter"), "tba-")
    _cleanup()
    listener = None
    try:
        sh("ip", "netns", "add", NS)
        sh("ip", "link", "add", H_IF, "type", "veth", "peer", "name", N_IF, "netns", NS)
        sh("ip", "addr", "add", f"{H_IP}/30", "dev", H_IF)
        sh("ip", "-n", NS, "addr", "add", f"{N_IP}/30", "dev", N_IF)
        sh("ip", "link", "set", H_IF, "up")
        for ifname in (N_IF, "lo"):
            sh("ip", "-n", NS, "link", "set", ifname, "up")
        listener = subprocess.Popen(["ip", "netns", "exec", NS, sys.executable, "-c", LISTEN,
                                     N_IP, str(PORT)], stdout=subprocess.PIPE, text=True)
        assert listener.stdout is not None and listener.stdout.readline().strip() == "up"
        yield
    finally:
        if listener is not None:
            stop(listener)
        _cleanup()


def features() -> dict[str, str]:
    """The host end's features as ethtool -k shows them (first word)."""
    found = netif.parse_features(sh("ethtool", "-k", H_IF).stdout)
    return {k: str(found[k]["on"]) for k in SHOWN}


def run_folder(tmp_path: Path, confirmed: bool = True) -> Path:
    """An advise run's folder with a confirmed configuration of NIC."""
    folder = tmp_path / "2026-12-07T00-00-00Z"
    folder.mkdir()
    (folder / "advise.json").write_text(json.dumps({"status": "complete", "workloads": []}))
    (folder / "config.json").write_text(json.dumps({
        "confirmed": confirmed, "changes": {"tso": "off", "gro": "on"}, "nic": NIC,
        "status": "confirmed on 2 workload(s): tso off, gro on" if confirmed else
        "not confirmed: 0.1 min of the budget were left; kept: the current configuration",
        "interfaces": [{"node": None, "label": "web:eth0", "ifname": "eth0",
                        "container": "tierbench-web-1", "nic": NIC}]}))
    return folder


def test_apply_sets_the_confirmed_configuration_and_its_revert_script_puts_it_back(
        pair: None, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERBENCH_ROLLBACK_TIMEOUT_S", "5")
    before = features()
    assert before == {"tcp-segmentation-offload": "True", "generic-receive-offload": "False"}
    folder = run_folder(tmp_path)
    assert cli.main(["advise", "apply", str(folder), "--interface", H_IF,
                     "--check-address", f"{N_IP}:{PORT}"]) == 0
    out = capsys.readouterr().out
    assert f"host {H_IF}: set tcp-segmentation-offload off, generic-receive-offload on; kept " \
           "(reachable)" in out
    assert features() == {"tcp-segmentation-offload": "False", "generic-receive-offload": "True"}
    # kept: the guard was disarmed (its agent would have restored them 5 s after the last
    # renewal)
    time.sleep(8)
    assert features() == {"tcp-segmentation-offload": "False", "generic-receive-offload": "True"}
    script = folder / "applied" / f"host-{H_IF}.revert.sh"
    assert sh("sh", str(script)).returncode == 0
    assert features() == before


def test_a_configuration_that_loses_reachability_is_not_kept(pair: None,
                                                             tmp_path: Path) -> None:
    before = features()
    with pytest.raises(TierbenchError) as got:
        install.apply_run(run_folder(tmp_path), [H_IF], address=NOBODY, settle_s=0.5)
    assert str(got.value) == (f"not kept on {H_IF} (host): {NOBODY} did not take a TCP "
                              "connection after the change; the previous settings were "
                              "restored")
    assert features() == before


def test_apply_refuses_in_one_sentence_what_it_cannot_apply(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    unconfirmed = run_folder(tmp_path, confirmed=False)
    assert cli.main(["advise", "apply", str(unconfirmed)]) == 2
    assert capsys.readouterr().err == (
        f"tierbench: {unconfirmed} has no confirmed configuration to apply (not confirmed: "
        "0.1 min of the budget were left; kept: the current configuration)\n")
    (unconfirmed / "config.json").write_text(json.dumps({"confirmed": True, "changes": {},
                                                         "interfaces": [], "nic": NIC}))
    with pytest.raises(TierbenchError, match="names no interface of this host .* name the "
                                             "ones to set with --interface"):
        install.apply_run(unconfirmed)
