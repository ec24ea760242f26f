"""The command host's registration and its transcript reader, on a fresh manager."""

from __future__ import annotations

import roost_command_host as plugin

from roost_core.hosts import registered_hosts, session_seqs, transcript_reader
from roost_core.records import AGENT_MESSAGE_TYPE


def test_registers_one_host_with_its_reader_and_command(roost_plugin_manager) -> None:
    pm = roost_plugin_manager(plugin)
    (spec,) = registered_hosts(pm).values()
    assert spec.name == "command" and spec.takes_messages
    assert spec.factory is plugin.make_host and spec.transcript_entries is plugin.entries_of
    assert spec.command is not None and spec.command.run is plugin.run
    assert transcript_reader(spec) is plugin.entries_of


def test_unavailable_says_why(monkeypatch) -> None:
    monkeypatch.delenv("ROOST_COMMAND", raising=False)
    assert "ROOST_COMMAND" in plugin.unavailable()
    monkeypatch.setenv("ROOST_COMMAND", "no-such-program-here --flag")
    assert "'no-such-program-here'" in plugin.unavailable()
    monkeypatch.setenv("ROOST_COMMAND", "cat")
    assert plugin.unavailable() is None


def test_its_transcript_reads_as_roost_entries(tmp_path) -> None:
    path = tmp_path / "session.jsonl"
    lines = [
        {"type": "command-in", "seq": 1, "kind": "reply", "text": "shout this"},
        {"type": "command-out", "exit": 0, "text": "SHOUT THIS\n"},
        {"type": "command-in", "seq": 2, "kind": "message", "text": "<agent-message ...>", "from": "a1", "fromName": "lead", "relation": "parent", "id": "m00000001"},
        {"type": "command-out", "exit": 3, "text": "half"},
    ]
    path.write_text("".join(plugin.json.dumps(line) + "\n" for line in lines) + '{"type": "command-in", "seq": 9')  # a torn last line
    user, answer, message, failed = (entry for line in lines for entry in plugin.entries_of(line))
    assert (user.type, user.role, user.text) == ("message", "user", "shout this")
    assert (answer.role, answer.text) == ("assistant", "SHOUT THIS")
    assert message.custom_type == AGENT_MESSAGE_TYPE and message.details == {"seq": 2, "from": "a1", "fromName": "lead", "relation": "parent", "kind": "message", "id": "m00000001"}
    assert failed.text == "half\n(exit status 3)"
    assert plugin.entries_of({"type": "session"}) == []
    (spec,) = plugin.roost_register_hosts()
    assert session_seqs(spec, str(path)) == {1, 2}
