"""Warm pi processes (issue 14.2) with the pinned real pi: a new pi child takes a pi that
is already up, and a pooled pi never carries one child's model, thinking level,
settings, environment or token into another child — checked in the requests the fake
model receives, in the session files pi wrote, and in each child's /proc/PID/environ."""

from __future__ import annotations

import json
from pathlib import Path

import proctools
from conftest import wait_until
from fg import in_thread, run_async, session, spawn
from pikit import message_text


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)


def pool(daemon) -> dict:
    return daemon.call("daemon_status")["pool"]


def test_pooled_pis_carry_nothing_of_one_child_into_another(pi_kit, write_config, tmp_path):
    write_config({"piPoolSize": 2, "hibernateAfterSeconds": 600})
    scenario = {
        "default": {"steps": [{"say": "noted"}]},
        "models": {name: {"default": {"steps": [{"shell": "env | sort"}, {"say": f"{name}: {{input}}"}]}} for name in ("kid-a", "kid-b")},
    }
    fake = pi_kit.fake(scenario)
    models = json.loads((pi_kit.agent_dir / "models.json").read_text())
    for model in models["providers"]["fake"]["models"]:
        model["reasoning"] = model["id"].startswith("kid")
    (pi_kit.agent_dir / "models.json").write_text(json.dumps(models))
    settings_before = (pi_kit.agent_dir / "settings.json").read_bytes()
    daemon = pi_kit.daemon()
    cwd = {"a": tmp_path / "work-a", "b": tmp_path / "work-b"}
    for folder in cwd.values():
        folder.mkdir()
    kinds = {"a": {"model": "fake/kid-a", "thinking": "low"}, "b": {"model": "fake/kid-b", "thinking": "high"}}

    async def story():
        async with session(daemon, tmp_path) as lead:
            # The first child of each kind starts cold and tells the pool what to warm.
            for kind in ("a", "b"):
                await spawn(lead, f"cold {kind}", f"cold-{kind}", host="pi", cwd=str(cwd[kind]), **kinds[kind])
            await lead.wait_for_delivery(2, timeout=120)
            await in_thread(wait_until, lambda: pool(daemon)["ready"] == 2, 120, what="two warm pis")
            # The next two take them.
            kids = {}
            for kind in ("a", "b"):
                kids[kind] = await spawn(lead, f"warm {kind}", f"warm-{kind}", host="pi", cwd=str(cwd[kind]), **kinds[kind])
            assert pool(daemon)["adopted"] == 2
            await lead.wait_for_delivery(4, timeout=120)
            rows = {kind: daemon.job(kids[kind]) for kind in kids}
            pis = {kind: rows[kind]["hostPid"] for kind in kids}
            envs = {kind: environ(pis[kind]) for kind in kids}
            return kids, rows, pis, envs

    kids, _rows, pis, envs = run_async(story)
    records = {kind: daemon.record(kids[kind]) for kind in kids}
    # Each took a warm worker: its pi was up before the job existed.
    for kind in kids:
        log = (daemon.paths.jobs_dir / f"{kids[kind]}.log").read_text()
        assert "warm: waiting for a job" in log and log.count("starting pi") == 1
    # Two processes, one child each.
    assert pis["a"] != pis["b"] and all(proctools.proc(pid) for pid in pis.values())
    for kind, other in (("a", "b"), ("b", "a")):
        env = envs[kind]
        # Its own job and process mark, never the other child's; no token, no pool flag.
        assert env["ROOST_JOB"] == kids[kind]
        assert env["ROOST_WORKER_MARK"] == records[kind]["worker_mark"]
        assert "PI_JOB_TOKEN" not in env and "ROOST_WARM" not in env
        text = "\0".join(f"{k}={v}" for k, v in env.items())
        for leak in (kids[other], records[other]["token"], records[other]["worker_mark"], str(cwd[other]), records[kind]["token"]):
            assert leak not in text, leak
        # What its tools saw (pi's bash tool prints its environment): the same.
        entries = daemon.entries(kids[kind])
        tool_env = next(message_text(e["message"]) for e in entries if e.get("type") == "message" and e["message"]["role"] == "toolResult")
        assert f"ROOST_JOB={kids[kind]}" in tool_env
        assert kids[other] not in tool_env and records[other]["token"] not in tool_env and records[kind]["token"] not in tool_env
        # Its model, thinking level and cwd, as pi recorded them.
        header = entries[0]
        assert header["type"] == "session" and header["cwd"] == str(cwd[kind])
        assert [(e["provider"], e["modelId"]) for e in entries if e.get("type") == "model_change"] == [("fake", f"kid-{kind}")]
        assert [e["thinkingLevel"] for e in entries if e.get("type") == "thinking_level_change"] == [kinds[kind]["thinking"]]
    # The model saw each warm child's task with that child's model only.
    for kind in kids:
        asked = [r["model"] for r in fake.requests() if any(f"warm {kind}" in message_text(m) for m in r["messages"])]
        assert asked and set(asked) == {f"kid-{kind}"}
    # Nothing was written into the shared pi settings (no set_model / set_thinking_level).
    assert (pi_kit.agent_dir / "settings.json").read_bytes() == settings_before


def warm_pis(daemon, spare: set[int]) -> set[proctools.Proc]:
    """pi processes of this test's roost (by ROOST_HOME in /proc/PID/environ) other than
    ``spare``: the warm ones."""
    found = set()
    for p in proctools.with_environ("ROOST_HOME", str(daemon.paths.home)):
        try:
            exe = Path(f"/proc/{p[0]}/exe").resolve().name
        except OSError:
            continue
        if exe.startswith("node") and p[0] not in spare:
            found.add(p)
    return found


def test_a_warm_pi_ends_with_its_worker_and_with_the_daemon(pi_kit, tmp_path):
    pi_kit.fake({"default": {"steps": [{"say": "ok: {input}"}]}})
    daemon = pi_kit.daemon()
    job = daemon.start_job("a cold one", host="pi")
    daemon.wait_job(job, timeout=90)
    job_pi = daemon.job(job)["hostPid"]
    wait_until(lambda: pool(daemon)["ready"] == 1, 120, what="a warm pi")
    (first,) = wait_until(lambda: warm_pis(daemon, {job_pi}), what="the warm pi in /proc")
    worker = proctools.proc(proctools.parent(first[0]))
    assert worker is not None
    # Its worker killed: the pi goes too, and the pool warms another.
    proctools.kill9(worker[0])
    wait_until(lambda: not proctools.alive(first), what="the warm pi gone with its worker")
    wait_until(lambda: pool(daemon)["ready"] == 1, 120, what="the pool warm again")
    (second,) = wait_until(lambda: warm_pis(daemon, {job_pi}), what="the new warm pi in /proc")
    assert second != first
    second_worker = proctools.proc(proctools.parent(second[0]))
    # The daemon dies: a warm worker that lost it ends, with its pi (the job's worker
    # keeps running, as jobs do across daemon restarts).
    daemon.kill9()
    wait_until(lambda: not proctools.alive(second) and not proctools.alive(second_worker), what="the warm worker and pi gone with the daemon")
    assert proctools.proc(job_pi) is not None


def test_an_unused_warm_pi_ends_after_reap_after_seconds(pi_kit, write_config, tmp_path):
    write_config({"reapAfterSeconds": 3})
    pi_kit.fake({"default": {"steps": [{"say": "ok: {input}"}]}})
    daemon = pi_kit.daemon()
    job = daemon.start_job("a cold one", host="pi")
    daemon.wait_job(job, timeout=90)
    wait_until(lambda: pool(daemon)["ready"] == 1, 120, what="a warm pi")
    warm = wait_until(lambda: warm_pis(daemon, {daemon.job(job)["hostPid"] or 0}), what="the warm pi in /proc")
    wait_until(lambda: pool(daemon)["ready"] == 0 and pool(daemon)["warming"] == 0, 60, what="the warm pi ended")
    wait_until(lambda: not any(proctools.alive(p) for p in warm), what="its process gone")
    # Not warmed again: nobody asked for one in all that time.
    assert pool(daemon) == {"enabled": True, "size": 1, "max": 4, "warming": 0, "ready": 0, "adopted": 0, "missed": 1, "wakesWarm": 0, "wakesCold": 0}
