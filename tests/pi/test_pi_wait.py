"""``roost wait`` after a pi job's run that answered only an agent message (issue 49, B3):
that run ends ``idle``, not ``done``. A plain ``roost wait`` returns (idle is settled); a
wait for ``done`` runs out of time and says why (only a user's reply makes it done)."""

from __future__ import annotations

from clikit import Cli
from fg import in_thread, run_async, send, session, spawn


def test_a_run_that_answered_an_agent_settles_idle_and_wait_says_what_that_means(pi_kit, tmp_path):
    pi_kit.fake({"default": {"steps": [{"say": "ok: {input}"}]}})
    daemon = pi_kit.daemon()
    cli = Cli(daemon.env, tmp_path)

    async def story():
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "first task", "helper", host="pi")
            await in_thread(daemon.wait_job, kid, "done", timeout=60)
            assert cli("wait", "helper", "--state", "done").stdout == f"{kid}: done\n"
            ok, text, _data = await send(lead, kid, "thanks, one question")
            assert ok, text
            # Its run took only the agent's message: it ends idle.
            await in_thread(daemon.wait_job, kid, "idle", timeout=60)
            return kid

    kid = run_async(story)
    assert cli("wait", "helper").stdout == f"{kid}: idle\n"
    timed_out = cli("wait", "helper", "--state", "done", "--timeout", "0.2", expect=124)
    assert timed_out.stderr == (
        f"roost: timeout: job {kid} (helper) still idle after 0.2s, waiting for done; idle: its last run answered"
        " agent messages only, and it becomes done only after a run that takes a reply of yours"
        " (`roost wait` with no --state returns once it settles)\n"
    )
