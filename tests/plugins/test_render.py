"""The default renderer: one block per session-file entry."""

from __future__ import annotations

from typing import Any

import pytest

from roost_core.records import TranscriptEntry
from roost_core.transcript import parse_entry
from roost_plugins import render
from roost_plugins.render import render_header

ENVELOPE = (
    '<agent-message from="Checkout refactor" id="a1b2c3d4" relation="child" kind="report">\n'
    "All tests pass.\nReady for review.\n"
    "</agent-message>\n"
    "This comes from another agent session, not from the user."
)


@pytest.fixture
def pm(roost_plugin_manager):
    return roost_plugin_manager(render)


def rendered(pm, raw: dict[str, Any]) -> str | None:
    return pm.hook.roost_render_entry(entry=parse_entry(raw))


def text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def message(role: str, *content: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "message", "message": {"role": role, "content": list(content), **extra}}


def agent_message(content: Any, **details: Any) -> dict[str, Any]:
    return {
        "type": "custom_message",
        "customType": "pi-roost-agent-message",
        "content": content,
        "display": True,
        "details": details,
    }


def test_session_header_is_hidden(pm) -> None:
    assert rendered(pm, {"type": "session", "version": 3, "id": "x", "cwd": "/w"}) == ""


def test_user_message(pm) -> None:
    assert rendered(pm, message("user", text("fix the bug"))) == "› you: fix the bug"


def test_assistant_text_and_tool_calls(pm) -> None:
    raw = message(
        "assistant",
        text("Looking."),
        {"type": "toolCall", "id": "t1", "name": "read", "arguments": {"path": "a.py", "limit": 5}},
        {"type": "toolCall", "id": "t2", "name": "bash", "arguments": {"command": "ls é"}},
    )
    assert rendered(pm, raw) == (
        'assistant: Looking.\n⚙ read({"path":"a.py","limit":5})\n⚙ bash({"command":"ls é"})'
    )


def test_assistant_with_only_a_tool_call(pm) -> None:
    raw = message("assistant", {"type": "toolCall", "id": "t", "name": "ls", "arguments": {}})
    assert rendered(pm, raw) == "⚙ ls({})"


def test_tool_result_is_cut_to_200_chars(pm) -> None:
    raw = message("toolResult", text("y" * 500), toolName="bash", isError=False)
    assert rendered(pm, raw) == "  ↳ bash: " + "y" * 200


def test_tool_error(pm) -> None:
    raw = message("toolResult", text("no such file"), toolName="read", isError=True)
    assert rendered(pm, raw) == "  ↳ read: (error) no such file"


def test_agent_message_block(pm) -> None:
    details = {"seq": 4, "from": "a1b2c3d4", "fromName": "Checkout refactor", "relation": "child", "kind": "report"}
    assert rendered(pm, agent_message(ENVELOPE, **details)) == (
        "✉ report from Checkout refactor (child)\n│ All tests pass.\n│ Ready for review.\n╰─"
    )


def test_agent_message_without_an_envelope_shows_all_text(pm) -> None:
    details = {"seq": 1, "from": "b0000001", "relation": "sibling", "kind": "message"}
    raw = agent_message([text("plain\ntext")], **details)
    assert rendered(pm, raw) == "✉ message from b0000001 (sibling)\n│ plain\n│ text\n╰─"


@pytest.mark.parametrize(
    ("details", "header"),
    [
        (
            {"kind": "report", "from": "a1", "fromName": "Checkout refactor", "relation": "child"},
            "✉ report from Checkout refactor (child)",
        ),
        ({"kind": "message", "from": "a1", "relation": "external"}, "✉ message from a1 (external)"),
        ({"kind": "message", "from": "a1", "fromName": "", "relation": "parent"}, "✉ message from a1 (parent)"),
    ],
)
def test_render_header(details: dict[str, Any], header: str) -> None:
    assert render_header(details) == header


@pytest.mark.parametrize(
    "entry",
    [
        TranscriptEntry(type="model_change"),
        TranscriptEntry(type="custom_message", custom_type="someone-else", text="x"),
        TranscriptEntry(type="message", role="bashExecution", text="x"),
    ],
)
def test_unknown_entries_have_no_opinion(pm, entry: TranscriptEntry) -> None:
    assert pm.hook.roost_render_entry(entry=entry) is None


def test_render_is_trylast(pm) -> None:
    (impl,) = pm.hook.roost_render_entry.get_hookimpls()
    assert impl.trylast
