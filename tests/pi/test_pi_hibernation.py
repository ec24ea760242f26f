"""Hibernation with the pinned real pi (issue 14.1/14.3): a settled pi child is ended —
worker, pi and everything under them — after ``hibernateAfterSeconds`` (found gone by
walking /proc), and a message wakes it from its session file: it answers exactly once,
with the same session file, model, thinking level, cwd and tree links as before."""

from __future__ import annotations

import json

import proctools
from conftest import wait_until
from fg import in_thread, run_async, send, session, spawn
from pikit import agent_items, message_text

#: What pi's bash tool writes about its own process tree: pi (the tool's parent) and the
#: worker (pi's parent), each as "pid start-time", from /proc (not from roost).
WHO = (
    'p=$PPID; w=$(sed "s/.*) //" /proc/$p/stat | cut -d" " -f2); '
    'echo "$p $(sed "s/.*) //" /proc/$p/stat | cut -d" " -f20) $w $(sed "s/.*) //" /proc/$w/stat | cut -d" " -f20)" > {out}'
)


def test_a_pi_child_hibernates_and_a_message_wakes_it_to_answer_once(pi_kit, write_config, tmp_path):
    write_config({"hibernateAfterSeconds": 0.5})
    who = tmp_path / "who.txt"
    workdir = tmp_path / "work"
    workdir.mkdir()
    scenario = {
        "default": {"steps": [{"say": "noted"}]},
        "models": {
            "kid": {
                "run": [
                    {"steps": [{"shell": WHO.format(out=who)}, {"say": "first done"}]},
                    {"steps": [{"shell": "pwd"}, {"say": "done with {input}"}]},
                ]
            }
        },
    }
    fake = pi_kit.fake(scenario)
    # The child's model reasons, so its thinking level is a real setting ("low", not "off").
    models = json.loads((pi_kit.agent_dir / "models.json").read_text())
    for model in models["providers"]["fake"]["models"]:
        model["reasoning"] = model["id"] == "kid"
    (pi_kit.agent_dir / "models.json").write_text(json.dumps(models))
    daemon = pi_kit.daemon()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "look around", "kid", host="pi", model="fake/kid", thinking="low", cwd=str(workdir))
            await lead.wait_for_delivery(1, timeout=90)
            first = wait_until(lambda: who.exists() and who.read_text().split(), what="the tool's view of its processes")
            pi, worker = (int(first[0]), int(first[1])), (int(first[2]), int(first[3]))
            await in_thread(wait_until, lambda: not daemon.job(kid)["live"], 60, what="the child hibernated")
            gone = (not proctools.alive(pi), not proctools.alive(worker), proctools.with_environ("ROOST_JOB", kid))
            before = daemon.job(kid)
            ok, text, data = await send(lead, kid, "the second part")
            assert ok and data["result"] == "started", text
            await lead.wait_for_delivery(2, timeout=90)
            await in_thread(daemon.wait_job, kid, timeout=60)
            return kid, gone, before, [e for e in lead.delivered if e["kind"] == "report"]

    kid, gone, before, reports = run_async(story)
    # Hibernated: pi, its worker and every process started under the child's name ended.
    assert gone == (True, True, set())
    # Woken by the parent's message: it answered once, and reported (a parent's message).
    assert [r["content"].count("done with the second part") for r in reports] == [0, 1]
    entries = daemon.entries(kid)
    items = agent_items(entries)
    assert [i["details"]["kind"] for i in items] == ["message"] and "the second part" in items[0]["content"]
    requests = [r for r in fake.requests() if r["model"] == "kid"]
    asked = [r for r in requests if any("the second part" in message_text(m) for m in r["messages"])]
    assert asked and sum("the second part" in message_text(m) for m in asked[0]["messages"]) == 1
    # Same session file (one header), model and thinking level (never changed), cwd, links.
    assert sum(1 for e in entries if e.get("type") == "session") == 1
    assert [(e["provider"], e["modelId"]) for e in entries if e.get("type") == "model_change"] == [("fake", "kid")]
    assert [e["thinkingLevel"] for e in entries if e.get("type") == "thinking_level_change"] == ["low"]
    assistant = [e["message"] for e in entries if e.get("type") == "message" and e["message"]["role"] == "assistant"]
    assert {m["model"] for m in assistant} == {"kid"}
    results = [message_text(e["message"]) for e in entries if e.get("type") == "message" and e["message"]["role"] == "toolResult"]
    assert results[-1].strip() == str(workdir)
    after = daemon.job(kid)
    for key in ("session", "cwd", "parentSession", "parentPeer", "rootSession", "depth"):
        assert after[key] == before[key], key
    # A second pi ran it: the log shows two starts on the same file.
    log = (daemon.paths.jobs_dir / f"{kid}.log").read_text()
    assert log.count("starting pi") == 2
