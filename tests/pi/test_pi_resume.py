"""A real pi user's day with roost: a parent that quits while its child works hears the
child's report when it comes back, with no roost tool call; a session that never used
roost holds no daemon connection; the footer and the peer's name."""

from __future__ import annotations

import json

from conftest import wait_until
from pikit import agent_items, message_text

from roost_core.transcript import read_entries

PEER_ENTRY = "pi-roost-peer"


def statuses(pi) -> list[str | None]:
    """What the extension put in pi's footer, in order (RPC sends setStatus as an event)."""
    with pi.lock:
        return [e.get("statusText") for e in pi.events if e.get("type") == "extension_ui_request" and e.get("method") == "setStatus" and e.get("statusKey") == "roost"]


def markers(file) -> list[dict]:
    return [e for e in read_entries(file) if e.get("type") == "custom" and e.get("customType") == PEER_ENTRY]


def foreground_peers(daemon) -> list[dict]:
    return [row for row in daemon.call("agents")["agents"] if row["kind"] == "foreground" and row["live"]]


def test_only_a_session_roost_was_part_of_joins_when_pi_starts(pi_kit, tmp_path):
    scenario = {
        "run": [{"kind": "reply", "match": "who", "steps": [{"agents": {}}, {"say": "listed them"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    }
    fake = pi_kit.fake(scenario)
    daemon = pi_kit.daemon()
    plain_file, peer_file = tmp_path / "fg" / "plain.jsonl", tmp_path / "fg" / "peer.jsonl"

    # A session that never uses roost: tools, footer, and no connection once they are fetched.
    plain = pi_kit.rpc_pi(plain_file, tmp_path / "work")
    plain.prompt("hello there")
    assert "roost_agents" in fake.requests()[-1]["tools"]
    assert statuses(plain) == ["✉ roost"]
    # Only this test's own connection (each daemon.call opens one) remains.
    wait_until(lambda: daemon.call("daemon_status")["connections"] == 1, what="the tools connection closed")
    assert foreground_peers(daemon) == [] and markers(plain_file) == []
    plain.close()
    # Resumed, it stays lazy: the run ends with no peer and no connection.
    plain = pi_kit.rpc_pi(plain_file, tmp_path / "work")
    plain.prompt("and again")
    wait_until(lambda: daemon.call("daemon_status")["connections"] == 1, what="the tools connection closed")
    assert foreground_peers(daemon) == [] and statuses(plain) == ["✉ roost"]
    plain.close()

    # A session that used roost is marked once, in its own file.
    first = pi_kit.rpc_pi(peer_file, tmp_path / "work")
    first.prompt("who is around?")
    (peer,) = wait_until(lambda: foreground_peers(daemon), what="the peer")
    assert markers(peer_file)[0]["data"] == {"peer": peer["id"]}
    wait_until(lambda: f"✉ roost {peer['id']}" in statuses(first), what="the footer with the peer id")
    first.close()
    wait_until(lambda: foreground_peers(daemon) == [], what="the peer gone with its pi")

    # Started again on it: registered at start, before any prompt or tool call.
    again = pi_kit.rpc_pi(peer_file, tmp_path / "work")
    (back,) = wait_until(lambda: foreground_peers(daemon), what="the resumed session registered")
    assert back["id"] == peer["id"] and back["session"] == str(peer_file)
    wait_until(lambda: f"✉ roost {peer['id']}" in statuses(again), what="the footer with the peer id")
    assert len(markers(peer_file)) == 1
    requests = len(fake.requests())
    again.prompt("nothing to do with roost")
    # No roost tool was called to get there.
    assert not any(r["reply"].get("tool") for r in fake.requests()[requests:])

    # A fork of it (a new file with the same entries) joins at start too, as its own peer.
    forks = tmp_path / "forks"
    forked = pi_kit.rpc_pi(None, tmp_path / "work", extra=["--fork", str(peer_file), "--session-dir", str(forks)])
    fork_file = forked.state()["sessionFile"]
    assert fork_file.startswith(str(forks))
    rows = wait_until(lambda: len(foreground_peers(daemon)) == 2 and foreground_peers(daemon), what="the fork registered")
    assert {row["session"] for row in rows} == {str(peer_file), fork_file}


def test_a_real_pi_child_that_asks_reports_needs_input_with_its_question(pi_kit, tmp_path):
    question = "Should the cache live in redis or in postgres?"
    scenario = {
        "run": [
            {"kind": "reply", "steps": [{"spawn": {"task": "look at the cache", "name": "kid", "model": "kid"}}, {"say": "spawned the kid"}]},
            {"kind": "report", "steps": [{"agents": {}}, {"say": "the kid asks something"}]},
        ],
        "default": {"steps": [{"say": "ok"}]},
        "models": {"kid": {"default": {"steps": [{"say": f"I read the cache code; it is small.\n\n{question}"}]}}},
    }
    fake = pi_kit.fake(scenario)
    daemon = pi_kit.daemon()
    file = tmp_path / "fg" / "lead.jsonl"
    lead = pi_kit.rpc_pi(file, tmp_path / "work")
    lead.prompt("delegate the cache review")
    (kid,) = wait_until(lambda: daemon.call("jobs")["jobs"], what="the child")
    assert kid["host"] == "pi"
    row = daemon.wait_job(kid["id"], "needs_input", timeout=60)
    assert row["question"] == question
    # The parent's report says so, framed, and reached its model.
    (report,) = wait_until(lambda: [e for e in agent_items(read_entries(file)) if e["details"]["kind"] == "report"], what="the report")
    assert f"state: needs_input\nquestion: {question}\n" in report["content"]
    # The report run listed the agents: roost_agents shows the question too.
    listing = wait_until(lambda: [e for e in read_entries(file) if e.get("type") == "message" and e["message"].get("role") == "toolResult" and e["message"].get("toolName") == "roost_agents"], what="roost_agents")
    assert "kid  [child]  needs_input" in message_text(listing[0]["message"])
    assert f"    question: {question}" in message_text(listing[0]["message"])
    framed = [m for r in fake.requests() if r["model"] == "fake-model" for m in r["messages"] if 'kind="report"' in message_text(m)]
    assert framed and question in message_text(framed[0])
    (line,) = [line for line in pi_kit.roost("jobs").stdout.splitlines() if line.startswith(kid["id"])]
    assert "needs_input" in line and line.endswith(question)
    agents = json.loads(pi_kit.roost("agents", "--json").stdout)
    (kid_row,) = [r for r in agents if r["id"] == kid["id"]]
    assert kid_row["state"] == "needs_input" and kid_row["question"] == question


def test_the_footer_is_empty_and_nothing_joins_with_agent_tools_off(pi_kit, write_config, tmp_path):
    scenario = {"run": [{"kind": "reply", "match": "who", "steps": [{"agents": {}}, {"say": "listed"}]}], "default": {"steps": [{"say": "ok"}]}}
    fake = pi_kit.fake(scenario)
    daemon = pi_kit.daemon()
    file = tmp_path / "fg" / "main.jsonl"
    # A session that was a peer before the user turned the tools off.
    first = pi_kit.rpc_pi(file, tmp_path / "work")
    first.prompt("who is around?")
    wait_until(lambda: foreground_peers(daemon), what="the peer")
    assert markers(file)
    first.close()
    write_config({"agentTools": False})
    daemon.call("daemon_stop")
    daemon = pi_kit.daemon()
    pi = pi_kit.rpc_pi(file, tmp_path / "work")
    pi.prompt("hello again")
    assert "roost_agents" not in fake.requests()[-1]["tools"]
    assert all(not text for text in statuses(pi))
    wait_until(lambda: daemon.call("daemon_status")["connections"] == 1, what="the tools connection closed")
    assert foreground_peers(daemon) == []


def test_a_peer_is_named_after_the_pi_session_and_follows_a_rename(pi_kit, tmp_path):
    scenario = {"run": [{"kind": "reply", "match": "who", "steps": [{"agents": {}}, {"say": "listed"}]}], "default": {"steps": [{"say": "ok"}]}}
    pi_kit.fake(scenario)
    daemon = pi_kit.daemon()
    work = tmp_path / "checkout-service"
    # No session name: the folder.
    unnamed = pi_kit.rpc_pi(tmp_path / "fg" / "a.jsonl", work)
    unnamed.prompt("who is around?")
    (row,) = wait_until(lambda: foreground_peers(daemon), what="the peer")
    assert row["name"] == "checkout-service"
    unnamed.close()
    wait_until(lambda: foreground_peers(daemon) == [], what="the peer gone")

    named = pi_kit.rpc_pi(tmp_path / "fg" / "b.jsonl", work)
    assert named.call({"type": "set_session_name", "name": "Checkout refactor"})["success"]
    named.prompt("who is around?")
    (row,) = wait_until(lambda: foreground_peers(daemon), what="the peer")
    assert row["name"] == "Checkout refactor"
    # A rename shows once the session runs again (pi has no rename event).
    assert named.call({"type": "set_session_name", "name": "Login fix"})["success"]
    named.prompt("carry on")
    wait_until(lambda: [r["name"] for r in foreground_peers(daemon)] == ["Login fix"], what="the new name")
    named.close()
    wait_until(lambda: foreground_peers(daemon) == [], what="the peer gone")

    # ROOST_PI_NAME comes first.
    pi_kit.env["ROOST_PI_NAME"] = "reviewer"
    pinned = pi_kit.rpc_pi(tmp_path / "fg" / "c.jsonl", work)
    assert pinned.call({"type": "set_session_name", "name": "Checkout refactor"})["success"]
    pinned.prompt("who is around?")
    assert [r["name"] for r in wait_until(lambda: foreground_peers(daemon), what="the peer")] == ["reviewer"]


def test_a_parent_that_quit_hears_its_childs_report_when_resumed(pi_kit, tmp_path):
    """The user's day in a terminal: pi spawns a child, the user quits, the child finishes
    (its report is held), `pi -c` brings the parent back and the report arrives by itself."""
    gate = tmp_path / "gate"
    scenario = {
        "run": [
            {"kind": "reply", "steps": [{"spawn": {"task": "check the cache", "name": "kid", "model": "kid"}}, {"say": "spawned the kid"}]},
            {"kind": "report", "steps": [{"say": "thanks, kid"}]},
        ],
        "default": {"steps": [{"say": "ok"}]},
        "models": {"kid": {"default": {"steps": [{"wait_for": str(gate)}, {"say": "the cache is fine"}]}}},
    }
    fake = pi_kit.fake(scenario)
    daemon = pi_kit.daemon()
    pi_kit.require_socket_command()
    pi_kit.roost("pi", "install")
    work = tmp_path / "work"
    work.mkdir()

    first = pi_kit.tmux_start("first", [pi_kit.pi], cwd=work)
    pi_kit.wait_screen(first, "✉ roost")
    pi_kit.type_line(first, "please check the cache in the background")
    pi_kit.wait_screen(first, "spawned the kid")
    (parent,) = foreground_peers(daemon)
    (kid,) = daemon.call("jobs")["jobs"]
    assert kid["state"] == "running" and kid["parentSession"] == parent["session"]
    pi_kit.type_line(first, "/quit")
    wait_until(lambda: foreground_peers(daemon) == [], what="the parent gone")

    gate.write_text("go")
    daemon.wait_job(kid["id"], "done", timeout=60)
    wait_until(lambda: daemon.job(kid["id"])["undeliveredReport"], what="the report held for the parent")
    requests = len(fake.requests())

    resumed = pi_kit.tmux_start("resumed", [pi_kit.pi, "-c"], cwd=work)
    pi_kit.wait_screen(resumed, "✉ report from kid (child)", timeout=60)
    screen = pi_kit.wait_screen(resumed, "thanks, kid", timeout=30)
    assert f"✉ roost {parent['id']}" in screen
    assert "the cache is fine" in screen
    assert daemon.job(kid["id"])["undeliveredReport"] is False
    agents = json.loads(pi_kit.roost("agents", "--json").stdout)
    (row,) = [r for r in agents if r["id"] == parent["id"]]
    assert row["live"] and row["state"] == "connected" and row["session"] == parent["session"]

    # The model's next request carried the framed report, and nobody called a roost tool for it.
    after = fake.requests()[requests:]
    assert after and 'kind="report"' in message_text(after[0]["messages"][-1])
    assert "the cache is fine" in message_text(after[0]["messages"][-1])
    assert not any(r["reply"].get("tool") for r in after)
    entries = read_entries(parent["session"])
    (report,) = [e for e in agent_items(entries) if e["details"]["kind"] == "report"]
    assert report["details"]["fromName"] == "kid" and "the cache is fine" in report["content"]
    calls = [part["name"] for e in entries if e.get("type") == "message" and e["message"].get("role") == "assistant" for part in e["message"]["content"] if part.get("type") == "toolCall"]
    assert calls == ["roost_spawn"]
