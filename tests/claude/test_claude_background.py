"""Background Claude Code jobs (host ``claude``): the real Claude Code in stream-json mode
under a roost worker, against the fake Anthropic server."""

from __future__ import annotations

import re

from claudekit import FAKE_KEY, transcript_entries

from roost_plugins.claude import prompt_uuid, session_id_of


def test_a_claude_job_runs_its_task_in_its_own_transcript(claude_kit, tmp_path):
    env_dump = tmp_path / "tool-env.txt"
    fake = claude_kit.fake({"default": {"steps": [{"shell": f"env > {env_dump}"}, {"say": "Done: {input}"}]}})
    daemon = claude_kit.daemon()
    job = daemon.start_job("build the thing", host="claude", name="builder")
    row = daemon.wait_job(job, timeout=90)
    assert row["state"] == "done", row
    assert row["summary"] == "Done: build the thing"
    session = daemon.record(job)["session"]
    # The job's session is Claude Code's own transcript, named by its session id.
    assert session.startswith(str(claude_kit.home / ".claude" / "projects"))
    entries = transcript_entries(session)
    prompts = [e for e in entries if e.get("type") == "user" and isinstance((e.get("message") or {}).get("content"), str)]
    assert [p["message"]["content"] for p in prompts] == ["build the thing"]
    assert prompts[0]["uuid"] == prompt_uuid(session_id_of(session), 1)
    tool_env = env_dump.read_text()
    assert "PI_JOB_TOKEN" not in tool_env and daemon.record(job)["token"] not in tool_env
    requests = fake.requests()
    assert {r["apiKey"] for r in requests} == {FAKE_KEY}
    assert {"mcp__roost__roost_agents", "mcp__roost__roost_send", "mcp__roost__roost_spawn", "Bash"} <= set(requests[0]["tools"])


# ---------------------------------------------------------------------------- agent items

import json  # noqa: E402
import subprocess  # noqa: E402

from conftest import wait_until  # noqa: E402
from fg import (  # noqa: E402
    answer_the_question,
    in_thread,
    reap_and_wake,
    run_async,
    send_after_first_call,
    send_during_last_answer,
    session,
    spawn,
)
from pikit import roost_bin  # noqa: E402

from roost_core.hosts.handover import marked_seqs  # noqa: E402
from roost_core.policy import NO_USER_AUTHORITY  # noqa: E402
from roost_plugins.claude import WAKE_PROMPT  # noqa: E402

AUTHORITY_LINE = NO_USER_AUTHORITY.splitlines()[0]


def hook_contexts(entries, event=None):
    """roost's hand-overs in a Claude transcript: (event, seqs, text) of each hook context
    and blocked stop that starts with the marker."""
    found = []
    for entry in entries:
        attachment = entry.get("attachment") or {}
        if entry.get("type") != "attachment":
            continue
        if attachment.get("type") == "hook_additional_context":
            for text in attachment.get("content") or []:
                if marked_seqs(text):
                    found.append((attachment.get("hookEvent"), marked_seqs(text), text))
        elif attachment.get("type") == "hook_blocking_error":
            text = (attachment.get("blockingError") or {}).get("blockingError") or ""
            if marked_seqs(text):
                found.append(("Stop", marked_seqs(text), text))
    return [f for f in found if event is None or f[0] == event]


def user_prompts(entries):
    return [e["message"]["content"] for e in entries if e.get("type") == "user" and isinstance((e.get("message") or {}).get("content"), str) and not e.get("isMeta")]


def receipts_of(daemon, sender_session_peer):
    return daemon.call("log", job=sender_session_peer)["sent"]


def test_a_message_sent_during_a_slow_tool_arrives_mid_turn_as_hook_context(claude_kit, tmp_path):
    gate = tmp_path / "gate"
    scenario = {
        "run": [{"steps": [{"wait_for": str(gate)}, {"shell": "echo second tool"}, {"say": "after the tools"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    }
    fake = claude_kit.fake(scenario)
    daemon = claude_kit.daemon()
    # The user has roost in their own Claude Code too: the job's Claude Code loads those
    # hooks and that server as well, and still hands each item over once.
    installed = subprocess.run([roost_bin(), "claude", "install"], env=claude_kit.env, capture_output=True, text=True, timeout=60)
    assert installed.returncode == 0, installed.stderr

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "do the slow thing", "slowpoke", host="claude")
            await send_after_first_call(lead, kid, fake.requests, "also check the docs", 90)
            gate.write_text("go")
            await in_thread(daemon.wait_job, kid, timeout=90)
            return kid

    kid = run_async(story)
    entries = daemon.entries(kid)
    # Handed over by PostToolUse, once, with its marker; never as a user prompt.
    contexts = hook_contexts(entries)
    assert [(event, len(seqs)) for event, seqs, _ in contexts] == [("PostToolUse", 1)], contexts
    assert "also check the docs" in contexts[0][2] and AUTHORITY_LINE in contexts[0][2]
    assert user_prompts(entries) == ["do the slow thing"]
    # The model saw it mid-turn: a system entry after a tool result, before the last answer.
    last = fake.requests()[-1]
    raw = last["raw"]
    at = next(i for i, m in enumerate(raw) if m["role"] == "system" and "also check the docs" in json.dumps(m))
    assert any(block.get("type") == "tool_result" for m in raw[:at] if isinstance(m["content"], list) for block in m["content"])
    assert last["reply"]["text"] == "after the tools"
    # Acknowledged: the daemon holds nothing for it any more.
    assert daemon.job(kid)["pending"] == 0


def test_an_item_that_arrives_while_the_last_answer_streams_blocks_the_stop(claude_kit, tmp_path):
    scenario = {
        "run": [{"steps": [{"shell": "echo one tool"}, {"say": "final words"}]}],
        "default": {"steps": [{"say": "ok: {input}"}]},
    }
    fake = claude_kit.fake(scenario)
    fake.hold = lambda reply: reply.get("text") == "final words"
    daemon = claude_kit.daemon()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "finish up", "closer", host="claude")
            await send_during_last_answer(daemon, lead, fake, kid, "one more thing")
            return kid, list(lead.delivered)

    kid, delivered = run_async(story)
    entries = daemon.entries(kid)
    contexts = hook_contexts(entries)
    assert [event for event, _, _ in contexts] == ["Stop"]
    assert "one more thing" in contexts[0][2]
    # The run went on with it, and reported once at its real end.
    assert fake.requests()[-1]["reply"]["text"] == "ok: one more thing"
    assert [d["kind"] for d in delivered] == ["report"]
    assert "ok: one more thing" in delivered[0]["content"]
    assert user_prompts(entries) == ["finish up"]


def test_a_claude_child_reports_to_its_parent_and_is_woken_by_its_answer(claude_kit, tmp_path):
    scenario = {
        "run": [{"steps": [{"agents": {}}, {"say": "Which colour, red or blue?"}]}],
        "default": {"steps": [{"say": "painted it {input}"}]},
    }
    fake = claude_kit.fake(scenario)
    daemon = claude_kit.daemon()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "paint the shed", "painter", host="claude")
            await answer_the_question(daemon, lead, kid, "blue")
            return kid, list(lead.delivered)

    kid, delivered = run_async(story)
    # The job's roost tools run through its worker: it sees its parent.
    listing = next(r for r in fake.requests() if any(m["role"] == "tool" for m in r["messages"]))
    tool_text = next(m["content"] for m in listing["messages"] if m["role"] == "tool")
    assert "lead" in tool_text and "[parent]" in tool_text, tool_text
    assert [d["kind"] for d in delivered] == ["report", "report"]
    assert "Which colour, red or blue?" in delivered[0]["content"]
    assert "painted it blue" in delivered[1]["content"]
    assert all(d["fromName"] == "painter" and d["relation"] == "child" for d in delivered)
    assert all(AUTHORITY_LINE in d["content"] for d in delivered)
    entries = daemon.entries(kid)
    # The parent's answer opened a turn with roost's fixed prompt; the answer itself came
    # as that prompt's hook context, never as the user's words.
    assert user_prompts(entries) == ["paint the shed", WAKE_PROMPT]
    contexts = hook_contexts(entries)
    assert [event for event, _, _ in contexts] == ["UserPromptSubmit"]
    assert "blue" in contexts[0][2]
    assert fake.requests()[-1]["reply"]["text"] == "painted it blue"
    # roost log renders Claude Code's transcript through the same render plugin as pi's:
    # the conversation and the agent message, none of Claude Code's bookkeeping.
    shown = subprocess.run([roost_bin(), "log", kid], env=claude_kit.env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "› you: paint the shed"
    assert "assistant: Which colour, red or blue?" in lines
    # The header names the message's id, for a reply that answers it (· mXXXXXXXX).
    at = next(n for n, line in enumerate(lines) if re.fullmatch(r"✉ message from lead \(parent\) · m[0-9a-f]{8}", line))
    assert lines[at + 1] == "│ blue" and lines[-1] == "assistant: painted it blue"
    assert not any(line.startswith(("attachment", "queue-operation", "[roost")) for line in lines), lines


def test_a_reaped_claude_job_resumes_its_session_and_holds_the_message_once(claude_kit, write_config, tmp_path):
    write_config({"reapAfterSeconds": 0.5})
    fake = claude_kit.fake({"default": {"steps": [{"say": "ok: {input}"}]}})
    daemon = claude_kit.daemon()
    kid = reap_and_wake(daemon, tmp_path, "claude")
    entries = daemon.entries(kid)
    log = (daemon.paths.jobs_dir / f"{kid}.log").read_text()
    assert log.count("starting claude") == 2 and "--resume" in log
    # One transcript: the second Claude Code resumed it and the model saw both turns.
    assert len({e.get("sessionId") for e in entries if e.get("sessionId")}) == 1
    last = fake.requests()[-1]
    texts = json.dumps(last["raw"])
    assert "first task" in texts and "wake up and look" in texts
    assert [len(seqs) for _, seqs, _ in hook_contexts(entries)] == [1]
    # Once in what the model reads (the hook's own log line, hook_success, aside).
    assert sum(text.count("wake up and look") for text in model_visible(entries)) == 1
    # The usage goes on from what the first Claude Code spent: every answer of both.
    spent = sum(r["usage"]["input_tokens"] + r["usage"]["output_tokens"] for r in fake.requests() if r["usage"])
    wait_until(lambda: (daemon.job(kid)["usage"] or {}).get("tokens") == spent, 30, what="the job's usage over both runs")


def model_visible(entries):
    """The texts of a Claude transcript the model reads: prompts, tool results, hook
    contexts and blocked stops, one text per hand-over. Claude Code records a blocked
    stop twice (a ``hook_blocking_error`` attachment, and the same reason as "Stop hook
    feedback" in a meta user entry) and shows the model both: one hand-over by roost,
    counted once here (see docs/hosts.md, the limits that come from the host)."""
    texts = []
    for e in entries:
        content = (e.get("message") or {}).get("content")
        if e.get("type") == "user" and e.get("isMeta") and isinstance(content, str) and content.startswith("Stop hook feedback:"):
            continue
        if e.get("type") == "user":
            texts.append(json.dumps((e.get("message") or {}).get("content")))
        elif e.get("type") == "attachment":
            attachment = e.get("attachment") or {}
            if attachment.get("type") == "hook_additional_context":
                texts.extend(attachment.get("content") or [])
            elif attachment.get("type") == "hook_blocking_error":
                texts.append((attachment.get("blockingError") or {}).get("blockingError") or "")
    return texts


def test_a_job_whose_claude_code_writes_elsewhere_fails_clearly(claude_kit, tmp_path):
    claude_kit.fake({"default": {"steps": [{"say": "ok: {input}"}]}})
    # Claude Code run with another config folder than the daemon sees.
    wrapper = tmp_path / "claude-elsewhere"
    wrapper.write_text(f"#!/bin/sh\nexport CLAUDE_CONFIG_DIR={tmp_path / 'elsewhere'}\nexec {claude_kit.claude} \"$@\"\n")
    wrapper.chmod(0o755)
    claude_kit.env["ROOST_CLAUDE_BIN"] = str(wrapper)
    daemon = claude_kit.daemon()
    job = daemon.start_job("where do you write?", host="claude")
    # Failed, with the task still queued (unacknowledged): it runs again once fixed.
    row = wait_until(lambda: (r := daemon.job(job))["state"] == "failed" and r, 90, what="the job failed")
    assert row["pending"] == 1
    assert "not to the job's" in row["error"] and "CLAUDE_CONFIG_DIR" in row["error"], row["error"]
