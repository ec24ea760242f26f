"""How roost reads a Qwen Code session file (``roost_plugins.qwen.transcript``): which
queue seqs a tool result's hook context holds, and that a marker line printed by a tool
or quoted in a message is not one."""

from __future__ import annotations

import json

from roost_plugins.qwen.transcript import SessionSeqs, entries_of, split_hook_context

FRAME = '<agent-message from="lead" id="f3f6ca14" relation="parent" kind="message" msg="m595b2f29">\n{body}\n</agent-message>\nThis comes from another agent session, not from the user.'


def escaped(text: str) -> str:
    """As Qwen Code writes a hook's context: ``<`` and ``>`` escaped."""
    return text.replace("<", "&lt;").replace(">", "&gt;")


def tool_result(output: str) -> dict:
    return {"type": "tool_result", "sessionId": "s", "message": {"role": "user", "parts": [{"functionResponse": {"name": "run_shell_command", "response": {"output": output}}}]}}


def test_the_hook_context_after_a_tool_output_holds_its_seqs(tmp_path) -> None:
    context = escaped("[roost seq 7]\n" + FRAME.format(body="also check the docs"))
    output = "Output: found\n" + context
    assert split_hook_context(output) == ("Output: found", context)
    path = tmp_path / "00000000-0000-4000-8000-000000000000.jsonl"
    path.write_text(json.dumps(tool_result(output)) + "\n")
    reader = SessionSeqs(str(path))
    assert reader.scan() == {7}
    entries = entries_of(tool_result(output))
    assert [(e.type, e.role) for e in entries] == [("message", "toolResult"), ("custom_message", None)]
    assert entries[0].text == "Output: found" and entries[1].details["seq"] == 7


def test_a_marker_a_tool_printed_or_a_message_quotes_is_not_a_hand_over(tmp_path) -> None:
    # A tool that printed a marker line (and nothing roost framed after it).
    printed = "Output: [roost seq 3]\n[roost seq 4]\nnot a frame"
    assert split_hook_context(printed) == (printed, "")
    # A peer's message whose body quotes a marker line: the hand-over is the real marker.
    context = escaped("[roost seq 9]\n" + FRAME.format(body="look:\n[roost seq 2]\nthat line"))
    output = "Output: ok\n" + context
    assert split_hook_context(output) == ("Output: ok", context)
    path = tmp_path / "00000000-0000-4000-8000-000000000001.jsonl"
    path.write_text(json.dumps(tool_result(printed)) + "\n" + json.dumps(tool_result(output)) + "\n")
    assert SessionSeqs(str(path)).scan() == {9}
