"""The default tools plugin: definitions and the text the model reads back."""

from __future__ import annotations

import pytest

from roost_core.peerstate import ON_MESSAGE
from roost_core.records import ToolDef, ToolResult
from roost_core.testing import make_config
from roost_plugins import tools


@pytest.fixture
def pm(roost_plugin_manager):
    return roost_plugin_manager(tools)


#: The hosts a test daemon registers (roost's own).
HOSTS = ("scripted", "shell", "pi", "claude")


def definitions(pm, hosts=HOSTS, **config) -> list[ToolDef]:
    contributed = pm.hook.roost_tool_definitions(config=make_config(**config), hosts=hosts)
    return [tool for tools_of_one_plugin in contributed for tool in tools_of_one_plugin]


def formatted(pm, tool: str, ok: bool = True, **fields) -> str | None:
    return pm.hook.roost_format_tool_result(result=ToolResult(tool=tool, ok=ok, **fields))


def test_tools_off(pm) -> None:
    assert definitions(pm, agent_tools=False) == []


def test_three_tools_by_default(pm) -> None:
    agents, send, spawn = definitions(pm)
    assert agents.name == "roost_agents"
    assert agents.parameters == {
        "type": "object",
        "properties": {"watch": {"type": "string", "description": "peer id to watch"}},
        "additionalProperties": False,
    }
    assert send.name == "roost_send"
    assert send.parameters["required"] == ["to", "message"]
    assert set(send.parameters["properties"]) == {"to", "message", "reply_to", "urgent"}
    assert send.parameters["properties"]["urgent"] == {"type": "boolean"}
    assert send.parameters["additionalProperties"] is False
    assert send.parameters["properties"]["to"]["type"] == "string"
    # How long a message may be is the limits plugin's to say (message_too_long), not the schema's.
    assert send.parameters["properties"]["message"] == {"type": "string"}
    assert spawn.name == "roost_spawn"
    assert spawn.parameters["required"] == ["task"]
    assert set(spawn.parameters["properties"]) == {"task", "name", "cwd", "model", "thinking", "workspace"}
    assert "arrives by itself" in spawn.description and "do not poll" in spawn.description


def test_descriptions_say_what_the_spec_requires(pm) -> None:
    agents, send, _spawn = definitions(pm)
    assert "not from the user" in agents.description
    assert "do not poll" in agents.description
    assert "roost_send" in send.description
    assert "do not poll" in send.description
    # They cost tokens in every request.
    assert len(agents.description) < 250 and len(send.description) < 300


def test_descriptions_name_the_new_features(pm) -> None:
    agents, send, _spawn = definitions(pm)
    assert "watch" in agents.description and "settles, asks or ends" in agents.description
    assert all(scope in send.description for scope in ("*children", "*siblings", "*tree"))
    assert "urgent" in send.description and "reply_to" in send.description


def test_send_result_names_the_message_id(pm) -> None:
    data = {"result": "delivered", "to": "a1b2c3d4", "name": "Checkout", "relation": "child", "id": "m0123abcd"}
    assert formatted(pm, "roost_send", data=data) == "delivered to Checkout (a1b2c3d4, relation child); msg m0123abcd"


def test_broadcast_result_lists_every_receiver(pm) -> None:
    data = {
        "scope": "children",
        "id": "m0123abcd",
        "sent": [
            {"result": "delivered", "to": "c0000001", "name": "kid-a", "relation": "child", "id": "m0123abcd"},
            {"result": "refused", "to": "c0000002", "name": "kid-b", "relation": "child", "code": "rate_limited", "reason": "too many"},
        ],
    }
    assert formatted(pm, "roost_send", data=data).splitlines() == [
        "*children: msg m0123abcd",
        "  delivered to kid-a (c0000001, relation child)",
        "  refused kid-b (c0000002, relation child): rate_limited — too many",
    ]


@pytest.mark.parametrize(
    ("watch", "line"),
    [
        ({"id": "c1", "name": "kid", "result": "watching", "state": "running"}, "watching kid (c1): you will be told once when it settles, asks or ends"),
        ({"id": "c1", "name": "kid", "result": "settled", "state": "done"}, "not watching kid (c1): nothing under way (state done)"),
        ({"id": "c1", "name": "kid", "result": "asking", "state": "needs_input", "question": "which?"}, "not watching kid (c1): it asks now: which?"),
    ],
)
def test_agents_says_what_became_of_a_watch(pm, watch, line) -> None:
    assert formatted(pm, "roost_agents", data={"peers": [], "watch": watch}).splitlines()[-1] == line


def test_to_json(pm) -> None:
    assert definitions(pm)[0].to_json()["name"] == "roost_agents"


@pytest.mark.parametrize(
    ("result", "text"),
    [
        ("delivered", "delivered to Checkout (a1b2c3d4, relation child)"),
        ("queued", "queued for Checkout (a1b2c3d4, relation child)"),
        ("started", "started Checkout (a1b2c3d4, relation child)"),
        ("not running", "not running: Checkout (a1b2c3d4, relation child)"),
        ("stopped", "stopped: Checkout (a1b2c3d4, relation child)"),
    ],
)
def test_send_results(pm, result: str, text: str) -> None:
    data = {"result": result, "to": "a1b2c3d4", "name": "Checkout", "relation": "child"}
    assert formatted(pm, "roost_send", data=data) == text


def test_send_waiting_on_a_dialog(pm) -> None:
    data = {"result": "queued", "to": "b0000001", "name": "w", "relation": "sibling", "waiting": "waiting on a dialog"}
    assert formatted(pm, "roost_send", data=data) == "queued for w (b0000001, relation sibling) — waiting on a dialog"


def test_agents_listing(pm) -> None:
    peers = [
        {"id": "a1b2c3d4", "name": "Checkout", "relation": "child", "state": "running", "status": None,
         "summary": "refactoring cart.py", "question": None, "cwd": "/w"},
        {"id": "f0000001", "name": "main", "relation": "parent", "state": "needs_input", "status": "dialog",
         "summary": None, "question": "Which branch?", "cwd": "/w"},
    ]
    assert formatted(pm, "roost_agents", data={"peers": peers}) == (
        "a1b2c3d4  Checkout  [child]  running — refactoring cart.py\n"
        "f0000001  main  [parent]  needs_input (dialog)\n"
        "    question: Which branch?"
    )


def test_agents_listing_says_what_each_peer_does_and_what_a_message_does(pm) -> None:
    def peer(id, name, state, activity, status=None):
        return {"id": id, "name": name, "relation": "child", "state": state, "status": status, "summary": None, "question": None,
                "activity": activity, "onMessage": ON_MESSAGE[activity]}

    peers = [
        peer("c0000001", "a", "running", "running", status="tests"),
        peer("c0000002", "b", "done", "idle"),
        peer("c0000003", "c", "done", "hibernated"),
        peer("c0000004", "d", "failed", "crashed"),
        peer("c0000005", "e", "needs_input", "dialog"),
        peer("c0000006", "f", "stopped", "ended"),
    ]
    assert formatted(pm, "roost_agents", data={"peers": peers}).splitlines() == [
        "c0000001  a  [child]  running (tests): a message reaches it in this run",
        "c0000002  b  [child]  done: a message starts a run",
        "c0000003  c  [child]  done, hibernated: a message wakes it",
        "c0000004  d  [child]  failed, crashed: a message restarts it",
        "c0000005  e  [child]  needs_input, dialog: a message waits until the user answers its dialog",
        "c0000006  f  [child]  stopped: a message does not wake it (the user may restart it)",
    ]


def test_agents_empty(pm) -> None:
    assert formatted(pm, "roost_agents", data={"peers": []}) == "no reachable agent sessions"


@pytest.mark.parametrize("tool", ["roost_send", "roost_agents"])
def test_errors(pm, tool: str) -> None:
    text = formatted(pm, tool, ok=False, code="not_reachable", message="outside your session tree")
    assert text == "error (not_reachable): outside your session tree"


def test_other_tools_have_no_opinion(pm) -> None:
    assert formatted(pm, "bash", data={"id": "x"}) is None
    assert formatted(pm, "read", ok=False, code="x", message="y") is None


def test_spawn_result_says_a_report_will_arrive(pm) -> None:
    text = formatted(pm, "roost_spawn", data={"id": "a1b2c3d4", "name": "child", "report": "a report will arrive by itself"})
    assert text.startswith("spawned child (a1b2c3d4)")
    assert "report will arrive by itself" in text and "Do not poll" in text


def test_format_is_trylast(pm) -> None:
    (impl,) = pm.hook.roost_format_tool_result.get_hookimpls()
    assert impl.trylast


def test_the_message_schema_leaves_its_length_to_the_limits_plugin(pm) -> None:
    """Whichever limits plugin runs says how long a message may be (``message_too_long``);
    a length in the schema would be a second, stale copy of that policy."""
    send = definitions(pm, max_message_chars=500)[1]
    assert "maxLength" not in send.parameters["properties"]["message"]


def test_every_tool_declares_the_code_that_runs_it(pm) -> None:
    assert all(callable(tool.run) for tool in definitions(pm))


def test_spawn_gets_a_host_parameter_only_where_the_user_allows_a_choice(pm) -> None:
    *_, spawn = definitions(pm)
    assert "host" not in spawn.parameters["properties"]
    *_, spawn = definitions(pm, agent_spawn_hosts=("pi", "claude"))
    assert spawn.parameters["properties"]["host"] == {"type": "string", "enum": ["pi", "claude"], "description": "default: yours"}
    # The choices are registered hosts: a name no plugin registers is not offered.
    *_, spawn = definitions(pm, hosts=("scripted", "pi", "command"), agent_spawn_hosts=("claude", "command", "pi"))
    assert spawn.parameters["properties"]["host"]["enum"] == ["command", "pi"]
    *_, spawn = definitions(pm, hosts=("scripted",), agent_spawn_hosts=("claude",))
    assert "host" not in spawn.parameters["properties"]
    # The description is unchanged: a choice costs one short parameter, not more prose.
    assert spawn.description == definitions(pm)[2].description
