"""At-least-once on the wire, exactly once in the transcript: kills at the worst moments."""

from __future__ import annotations

from conftest import agent_items, wait_until
from fg import in_thread, run_async, send, session, spawn, wake_reaped

from roost_plugins.envelope import parse_envelopes

QUIET = {"default": {"steps": [{"say": "ok: {input}"}]}}


def bodies(entries) -> list[str]:
    return [parse_envelopes(e["content"])[0]["body"] for e in agent_items(entries)]


def test_message_to_a_reaped_worker_survives_kill9_of_the_daemon(daemon_factory, write_config, tmp_path):
    write_config({"reapAfterSeconds": 0.3})
    daemon = daemon_factory().start()

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "first", "kid", scenario=QUIET)
            await wake_reaped(daemon, lead, kid, "survive this")
            daemon.kill9()
            daemon.restart()
            await in_thread(daemon.wait_job, kid)
            await in_thread(wait_until, lambda: daemon.job(kid)["pending"] == 0, what="acked")
            assert bodies(daemon.entries(kid)) == ["survive this"]

    run_async(story)


def crash_between(daemon_factory, tmp_path, point: str) -> None:
    """A message steered into a busy child; the worker dies at ``point``; it comes back."""
    daemon = daemon_factory(ROOST_FAULTS=point).start()
    gate = tmp_path / "gate"

    async def story():
        async with session(daemon, tmp_path) as lead:
            scenario = {"run": [{"steps": [{"wait_for": str(gate)}, {"say": "after the gate"}]}], "default": {"steps": [{"say": "ok: {input}"}]}}
            kid = await spawn(lead, "busy", "kid", scenario=scenario)
            await in_thread(wait_until, lambda: daemon.job(kid)["connected"] and daemon.job(kid)["pending"] == 0, what="busy")
            first_pid = daemon.record(kid)["worker_pid"]
            _ok, _text, data = await send(lead, kid, "steer me")
            assert data["result"] == "delivered"
            gate.write_text("open")  # the tool returns: the steer is applied at this boundary
            await in_thread(wait_until, lambda: (daemon.paths.home / "faults" / point).exists(), what="fault fired")
            await in_thread(wait_until, lambda: daemon.job(kid)["pending"] == 0 and daemon.job(kid)["state"] != "running", what="settled")
            assert daemon.record(kid)["worker_pid"] != first_pid
            assert bodies(daemon.entries(kid)) == ["steer me"]

    run_async(story)


def test_worker_killed_after_steer_before_message_end_redelivers_once(daemon_factory, tmp_path):
    crash_between(daemon_factory, tmp_path, "worker.after_steer_before_message_end")


def test_worker_killed_after_message_end_before_ack_is_not_duplicated(daemon_factory, tmp_path):
    crash_between(daemon_factory, tmp_path, "worker.after_message_end_before_ack")
