"""Hibernation (issue 14.1/14.3) on the scripted host: a settled spawned child with
nothing pending is ended (worker and everything it started) after
``hibernateAfterSeconds``, and the next item wakes it from its session file, exactly as a
child that never slept: the same file, tree links, exactly-once delivery and report
rules. The real-pi version is tests/pi/test_pi_hibernation.py."""

from __future__ import annotations

import json

import proctools
from conftest import agent_items, wait_until
from fg import in_thread, run_async, send, session, spawn

from roost_plugins.envelope import parse_envelopes

GRACE = 0.3

#: The tool writes its parent (the worker: the scripted host runs in it) as "pid
#: start-time", from /proc, so the test can tell it from a later process with its pid.
WHO = 'echo "$PPID $(sed "s/.*) //" /proc/$PPID/stat | cut -d" " -f20)" > {pidfile}'
ASKER = {
    "run": [
        {"steps": [{"shell": WHO}, {"ask": "Which DB?"}]},
        {"steps": [{"shell": "pwd"}, {"say": "done with {input}"}]},
    ],
    "default": {"steps": [{"say": "noted: {input}"}]},
}


def asker(pidfile) -> dict:
    return json.loads(json.dumps(ASKER).replace("{pidfile}", str(pidfile)))


def reports_of(lead, name: str) -> list[str]:
    return [e["content"] for e in lead.delivered if e["kind"] == "report" and f'from="{name}"' in e["content"]]


def body(content: str) -> str:
    return parse_envelopes(content)[0]["body"]


def hibernated(daemon, job: str) -> dict | None:
    row = daemon.job(job)
    return row if not row["live"] and row["state"] != "running" and row["pending"] == 0 else None


def test_a_settled_child_hibernates_after_the_grace_and_a_root_job_does_not(daemon_factory, write_config, tmp_path):
    write_config({"hibernateAfterSeconds": GRACE})
    daemon = daemon_factory().start()
    root = daemon.start_job("a root job", scenario={"default": {"steps": [{"say": "ok"}]}})
    daemon.wait_job(root, "done")
    pidfile = tmp_path / "worker.pid"

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "pick a database", "kid", scenario=asker(pidfile))
            await in_thread(daemon.wait_job, kid, "needs_input")
            pid, start = pidfile.read_text().split()
            await in_thread(wait_until, lambda: hibernated(daemon, kid), what="the child hibernated")
            return kid, (int(pid), int(start))

    kid, worker = run_async(story)
    # Nothing of the child is left: not its worker, nothing started under its name.
    assert not proctools.alive(worker)
    assert not proctools.with_environ("ROOST_JOB", kid)
    row = daemon.job(kid)
    assert row["state"] == "needs_input" and row["question"] == "Which DB?"
    assert row["workerPid"] is None and row["hostPid"] is None
    # The root job settled before the child was spawned, and still has its worker: the
    # grace is for spawned children; other jobs are reaped after reapAfterSeconds.
    assert daemon.job(root)["live"]


def test_a_hibernated_child_woken_by_its_parent_answers_once_and_reports(daemon_factory, write_config, tmp_path):
    write_config({"hibernateAfterSeconds": GRACE})
    daemon = daemon_factory().start()
    workdir = tmp_path / "work"
    workdir.mkdir()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "pick a database", "kid", scenario=asker(tmp_path / "w.pid"), cwd=str(workdir))
            await lead.wait_for_delivery(1)
            await in_thread(wait_until, lambda: hibernated(daemon, kid), what="the child hibernated")
            before = daemon.job(kid)
            # The parent's answer wakes it, as a message from its parent.
            ok, text, data = await send(lead, kid, "postgres")
            assert ok and data["result"] == "started", text
            await in_thread(wait_until, lambda: len(reports_of(lead, "kid")) == 2, what="the second report")
            await in_thread(daemon.wait_job, kid, "done")
            return kid, before, reports_of(lead, "kid")

    kid, before, got = run_async(story)
    assert body(got[0]).startswith("state: needs_input\nquestion: Which DB?")
    assert body(got[1]) == "state: done\n\ndone with postgres"
    after = daemon.job(kid)
    # Same session file, cwd and tree links as before it slept.
    for key in ("session", "cwd", "parentSession", "parentPeer", "rootSession", "depth"):
        assert after[key] == before[key], key
    entries = daemon.entries(kid)
    assert sum(1 for e in entries if e.get("type") == "session") == 1
    items = agent_items(entries)
    assert [i["details"]["kind"] for i in items] == ["message"] and "postgres" in items[0]["content"]
    # The woken worker ran its tool in the child's cwd.
    outputs = [e["message"]["content"][0]["text"] for e in entries if e.get("type") == "message" and e["message"].get("toolName") == "bash"]
    assert outputs[-1].strip() == str(workdir)
    # It went back to sleep afterwards.
    wait_until(lambda: hibernated(daemon, kid), what="the child hibernated again")


def test_a_hibernated_child_woken_by_a_user_reply_reports_and_by_another_agent_does_not(daemon_factory, write_config, tmp_path):
    write_config({"hibernateAfterSeconds": GRACE, "agentExternalMessages": True})
    daemon = daemon_factory().start()
    quiet = {"default": {"steps": [{"say": "ok: {input}"}]}}

    async def story():
        async with session(daemon, tmp_path) as lead, session(daemon, tmp_path, name="stranger") as stranger:
            kid = await spawn(lead, "first", "kid", scenario=quiet)
            await lead.wait_for_delivery(1)
            await in_thread(wait_until, lambda: hibernated(daemon, kid), what="the child hibernated")
            # A user reply wakes it and its run reports (a user reply is report-worthy).
            assert daemon.call("reply", job=kid, text="from the user")["result"] == "started"
            await in_thread(wait_until, lambda: len(reports_of(lead, "kid")) == 2, what="the reply's report")
            await in_thread(wait_until, lambda: hibernated(daemon, kid), what="the child hibernated again")
            # A message from an agent outside its tree wakes it too; that run does not report.
            ok, text, data = await send(stranger, kid, "hello from outside")
            assert ok and data["result"] == "started", text
            await in_thread(wait_until, lambda: any("ok: hello from outside" in (e.get("message") or {}).get("content", [{}])[0].get("text", "") for e in daemon.entries(kid) if e.get("type") == "message"), what="the message answered")
            await in_thread(wait_until, lambda: hibernated(daemon, kid), what="the child hibernated a third time")
            return kid, reports_of(lead, "kid")

    kid, got = run_async(story)
    assert [body(r) for r in got] == ["state: done\n\nok: first", "state: done\n\nok: from the user"]
    entries = daemon.entries(kid)
    assert sum(1 for e in entries if e.get("type") == "session") == 1
