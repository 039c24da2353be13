"""The one command transport (tierbench/transport.py): the argv it builds here, in a network
namespace, on a node (a stand-in `sh -c` for ssh runs the remote command here) and in a
container through a node's Docker context; what it says when a command cannot run; and the
record a state file keeps of it."""

from __future__ import annotations

import pytest

from tierbench import transport
from tierbench.transport import LOCAL, Transport, TransportError

NODE = Transport("node1", ("sh", "-c"), "tierbench-node1")  # `sh -c` stands in for ssh


def test_here_a_command_is_its_argv_and_a_snippet_runs_in_sh() -> None:
    assert LOCAL.argv(["ip", "link"]) == ["ip", "link"]
    assert LOCAL.argv("echo a; echo b") == ["sh", "-c", "echo a; echo b"]
    assert LOCAL.argv(["ip", "link"], netns=42) == ["nsenter", "-t", "42", "-n", "ip", "link"]
    assert LOCAL.run("echo a; echo b").stdout == "a\nb\n"
    assert not LOCAL.remote and LOCAL.where == "" and LOCAL.record() == {}


def test_on_a_node_the_command_is_one_string_for_its_shell() -> None:
    assert NODE.argv(["echo", "a b", "c'd"]) == ["sh", "-c", "echo 'a b' 'c'\"'\"'d'"]
    assert NODE.argv("echo $HOME") == ["sh", "-c", "echo $HOME"]  # a snippet as written
    assert NODE.argv(["ip", "link"], netns=7) == ["sh", "-c", "nsenter -t 7 -n ip link"]
    assert NODE.run(["echo", "a b", "c'd"]).stdout == "a b c'd\n"
    assert NODE.remote and NODE.where == " on node1"


def test_a_container_is_reached_through_its_hosts_engine() -> None:
    assert LOCAL.exec_argv("cid", ["ls"]) == ["docker", "exec", "cid", "ls"]
    assert NODE.exec_argv("cid", ["psql"], env={"A": "1"}, user="postgres", interactive=True) == [
        "docker", "--context", "tierbench-node1", "exec", "-i", "-e", "A=1", "-u", "postgres",
        "cid", "psql"]
    assert NODE.docker("start", "cid") == ["docker", "--context", "tierbench-node1", "start",
                                           "cid"]


def test_what_cannot_run_is_said_once_for_the_caller_to_word() -> None:
    with pytest.raises(TransportError) as info:
        LOCAL.run(["no-such-program-tierbench"])
    assert info.value.missing == "no-such-program-tierbench" and info.value.timeout is None
    with pytest.raises(TransportError) as info:
        LOCAL.run(["sleep", "5"], timeout=0.2)
    assert info.value.timeout == 0.2 and info.value.missing is None
    gone = Transport("gone", ("sh", "-c", "exit 255"))
    done = gone.run(["true"])
    assert gone.unreachable(done) and not LOCAL.unreachable(done)


def test_a_state_file_keeps_how_to_reach_the_node_again() -> None:
    assert NODE.record() == {"node": "node1", "ssh": ["sh", "-c"]}
    assert transport.of(NODE.record()) == Transport("node1", ("sh", "-c"))
    assert transport.of({}) is LOCAL and transport.of(None) is LOCAL
    assert transport.of({"node": None, "ssh": []}) is LOCAL


def test_a_batch_is_one_round_trip_and_each_command_keeps_its_own_result(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Several argvs in one shell (on a node, one ssh command): each runs whatever the others
    did, with its own exit code, stdout (without a trailing newline it had none) and stderr;
    a program that is not installed is the shell's 127; when the shell itself fails (ssh did
    not reach the node) every command gets that failure."""
    commands = [["echo", "a b"], ["sh", "-c", "printf x; echo oops >&2; exit 3"],
                ["no-such-program-tierbench"], ["printf", "%s\n\n", "two lines"]]
    sent: list[list[str]] = []
    real = transport.run_argv

    def counted(argv: list[str], **kwargs: object) -> transport.CompletedProcess:
        sent.append(argv)
        return real(argv, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(transport, "run_argv", counted)
    for where in (LOCAL, NODE):
        sent.clear()
        done = where.run_batch(commands)
        assert len(sent) == 1
        assert [(d.returncode, d.stdout) for d in done] == [
            (0, "a b\n"), (3, "x"), (127, ""), (0, "two lines\n\n")]
        assert done[1].stderr == "oops\n" and "not found" in done[2].stderr
        assert done[0].stderr == "" and [d.args for d in done] == commands
    gone = Transport("gone", ("sh", "-c", "echo no route >&2; exit 255"))
    done = gone.run_batch(commands[:2])
    assert [(d.returncode, d.stderr) for d in done] == [(255, "no route\n")] * 2
    assert all(gone.unreachable(d) for d in done)
    assert [d.stdout for d in LOCAL.run_batch([["echo", "one"]])] == ["one\n"]
