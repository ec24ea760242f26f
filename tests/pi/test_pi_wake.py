"""Warm wakes and warm fan-outs with the pinned real pi (issue 42, "wakes in a blink").

A hibernated child woken by a message or a broadcast takes a warm pi from the pool, which
switches to the child's own session file (pi's ``switch_session``): the transcript stays
the same file, nothing delivered before the child slept is delivered again, the new item
arrives once. With no warm pi free a wake starts pi cold and the job's log says so. The
pool grows to a burst of spawns (up to ``piPoolMax``), so four children spawned at once
each take a warm pi. Every fact is observable: the worker's log lines, the pool's
counters, the session files, the requests the fake model received, /proc.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import proctools
import pytest
from conftest import wait_until
from fg import in_thread, run_async, send, session, spawn
from pikit import agent_items, message_text

#: What pi's bash tool writes: pi's pid (the tool's parent) and the job the tool runs for.
WHO = 'echo "$PPID $ROOST_JOB" > {out}'
WARM_SWITCH = "switched to this job's session"


def pool(daemon) -> dict:
    return daemon.call("daemon_status")["pool"]


def node_pids(daemon) -> set[int]:
    """The pi (node) processes of this test's roost, found in /proc by ROOST_HOME."""
    found = set()
    for pid, _created in proctools.with_environ("ROOST_HOME", str(daemon.paths.home)):
        try:
            if Path(f"/proc/{pid}/exe").resolve().name.startswith("node"):
                found.add(pid)
        except OSError:
            continue
    return found


def log_of(daemon, job: str) -> str:
    return (daemon.paths.jobs_dir / f"{job}.log").read_text()


def kid_scenario(who: Path) -> dict:
    return {
        "default": {"steps": [{"say": "noted"}]},
        "models": {
            "kid": {
                "run": [
                    {"steps": [{"say": "first done"}]},
                    {"steps": [{"shell": WHO.format(out=who)}, {"say": "done with {input}"}]},
                ]
            }
        },
    }


def test_a_hibernated_pi_child_wakes_into_a_warm_pi_that_adopts_its_session(pi_kit, write_config, tmp_path):
    write_config({"hibernateAfterSeconds": 0.5})
    who = tmp_path / "who.txt"
    workdir = tmp_path / "work"
    workdir.mkdir()
    fake = pi_kit.fake(kid_scenario(who))
    daemon = pi_kit.daemon()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "look around", "kid", host="pi", model="fake/kid", cwd=str(workdir))
            await lead.wait_for_delivery(1, timeout=90)
            # The spawn taught the pool the child's settings; the child then sleeps.
            await in_thread(wait_until, lambda: pool(daemon)["ready"] == 1, 120, what="a warm pi")
            await in_thread(wait_until, lambda: not daemon.job(kid)["live"], 60, what="the child hibernated")
            warm_before = node_pids(daemon)
            session_before = daemon.record(kid)["session"]
            ok, text, data = await send(lead, kid, "the second part")
            assert ok and data["result"] == "started", text
            await lead.wait_for_delivery(2, timeout=90)
            await in_thread(daemon.wait_job, kid, timeout=60)
            record = daemon.record(kid)
            # It sleeps again: nothing of the wake is left running.
            await in_thread(wait_until, lambda: not daemon.job(kid)["live"], 60, what="the child hibernated again")
            return kid, warm_before, session_before, record, [e for e in lead.delivered if e["kind"] == "report"]

    kid, warm_before, session_before, record, reports = run_async(story)
    status = pool(daemon)
    assert (status["wakesWarm"], status["wakesCold"]) == (1, 0)
    log = log_of(daemon, kid)
    # The worker says how it started: the spawn cold (no slot yet), the wake warm.
    first, _, woken = log.partition("warm start: this warm worker (slot ")
    assert "cold start: no warm pi was free" in first and woken
    assert "cold start" not in woken and f"{WARM_SWITCH} {session_before}" in woken
    slot = woken.split(")", 1)[0]
    # The pi that ran the woken child was up before the message: a warm one.
    pi_pid, job_seen = who.read_text().split()
    assert int(pi_pid) in warm_before
    # Its tools run under the child's name, not the slot's.
    assert job_seen == kid
    # Nothing of the wake outlives its second sleep (its worker start's mark, its pi).
    assert proctools.with_environ("ROOST_WORKER_MARK", record["worker_mark"]) == set()
    assert int(pi_pid) not in node_pids(daemon)
    # The same session file, one header; the slot's own session file was never written.
    assert record["session"] == session_before
    assert not (daemon.paths.sessions_dir / f"{slot}.jsonl").exists()
    entries = daemon.entries(kid)
    assert sum(1 for e in entries if e.get("type") == "session") == 1
    users = [message_text(e["message"]) for e in entries if e.get("type") == "message" and e["message"]["role"] == "user"]
    assert sum("look around" in text for text in users) == 1
    # The new item arrived once; what came before it was not delivered again.
    items = agent_items(entries)
    assert [i["details"]["kind"] for i in items] == ["message"] and "the second part" in items[0]["content"]
    asked = [r for r in fake.requests() if r["model"] == "kid" and any("the second part" in message_text(m) for m in r["messages"])]
    assert asked
    for request in asked:
        texts = [message_text(m) for m in request["messages"]]
        assert sum("the second part" in t for t in texts) == 1 and sum("look around" in t for t in texts) == 1
    assert [r["content"].count("done with the second part") for r in reports] == [0, 1]


def test_a_broadcast_wakes_one_child_warm_and_the_other_cold_when_the_pool_has_one(pi_kit, write_config, tmp_path):
    write_config({"hibernateAfterSeconds": 0.5, "piPoolSize": 1, "piPoolMax": 1})
    workdir = tmp_path / "work"
    workdir.mkdir()
    scenario = {
        "default": {"steps": [{"say": "noted"}]},
        "models": {"kid": {"run": [{"steps": [{"say": "first done"}]}, {"steps": [{"say": "heard {input}"}]}]}},
    }
    pi_kit.fake(scenario)
    daemon = pi_kit.daemon()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kids = [await spawn(lead, f"task {n}", f"kid{n}", host="pi", model="fake/kid", cwd=str(workdir)) for n in (1, 2)]
            await lead.wait_for_delivery(2, timeout=120)
            await in_thread(wait_until, lambda: pool(daemon)["ready"] == 1, 120, what="a warm pi")
            for kid in kids:
                await in_thread(wait_until, lambda kid=kid: not daemon.job(kid)["live"], 60, what="the child hibernated")
            ok, text, _data = await send(lead, "*children", "status please")
            assert ok, text
            await lead.wait_for_delivery(4, timeout=120)
            for kid in kids:
                await in_thread(daemon.wait_job, kid, timeout=60)
            return kids, [e for e in lead.delivered if e["kind"] == "report"]

    kids, reports = run_async(story)
    status = pool(daemon)
    assert (status["wakesWarm"], status["wakesCold"]) == (1, 1)
    logs = {kid: log_of(daemon, kid) for kid in kids}
    # Both spawns found no warm pi (the first one made); the wakes: one warm, one cold,
    # and the cold one's log says so a second time.
    warm = [kid for kid in kids if WARM_SWITCH in logs[kid]]
    cold = [kid for kid in kids if kid not in warm]
    assert len(warm) == 1 and len(cold) == 1, logs
    assert logs[warm[0]].count("cold start: no warm pi was free") == 1
    assert logs[cold[0]].count("cold start: no warm pi was free") == 2
    # Each child heard the broadcast once and answered once.
    for kid in kids:
        items = agent_items(daemon.entries(kid))
        assert [i["content"].count("status please") for i in items] == [1]
    assert sorted(r["content"].count("heard") for r in reports) == [0, 0, 1, 1]


# Eight pi starts and four warm-ups on a 2-core machine: more than the default 120 s may
# pass under load (the waits inside say what they wait for).
@pytest.mark.timeout(300)
def test_four_children_spawned_at_once_each_take_a_warm_pi_once_the_pool_learnt_the_burst(pi_kit, write_config, tmp_path):
    write_config({"hibernateAfterSeconds": 600, "piPoolSize": 1, "piPoolMax": 4})
    pi_kit.fake({"default": {"steps": [{"say": "done: {input}"}]}})
    daemon = pi_kit.daemon()

    async def fan_out(lead, tag: str) -> list[str]:
        kids: list[str] = []
        async with anyio.create_task_group() as tg:
            for n in range(4):
                async def one(n=n):
                    kids.append(await spawn(lead, f"{tag} {n}", f"{tag}{n}", host="pi", model="fake/kid", cwd=str(tmp_path)))
                tg.start_soon(one)
        return kids

    async def story():
        async with session(daemon, tmp_path) as lead:
            first = await fan_out(lead, "first")
            await lead.wait_for_delivery(4, timeout=180)
            # The burst of four taught the pool its size: it warms four (two at a time).
            await in_thread(wait_until, lambda: pool(daemon)["ready"] == 4, 240, what="four warm pis")
            before = pool(daemon)
            warm = node_pids(daemon) - {daemon.job(k)["hostPid"] for k in first}
            second = await fan_out(lead, "second")
            await lead.wait_for_delivery(8, timeout=180)
            rows = {kid: daemon.job(kid) for kid in second}
            return first, second, before, warm, rows, [e for e in lead.delivered if e["kind"] == "report"]

    first, second, before, warm, rows, reports = run_async(story)
    assert before["size"] == 4 and before["max"] == 4 and len(warm) == 4
    after = pool(daemon)
    assert after["adopted"] - before["adopted"] == 4
    for kid in second:
        log = log_of(daemon, kid)
        assert "warm start: pi" in log and "was up before this job existed" in log and "cold start" not in log
        assert rows[kid]["hostPid"] in warm
    # Four pis for four children, one each.
    assert len({rows[kid]["hostPid"] for kid in second}) == 4
    # Each child's task arrived once and was answered once.
    for kid in first + second:
        users = [message_text(e["message"]) for e in daemon.entries(kid) if e.get("type") == "message" and e["message"]["role"] == "user"]
        assert len(users) == 1
    texts = [r["content"] for r in reports]
    for n in range(4):
        for tag in ("first", "second"):
            assert sum(f"done: {tag} {n}" in t for t in texts) == 1


