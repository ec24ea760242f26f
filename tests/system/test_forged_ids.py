"""A message id is read only from what roost wrote, never from a message's text (issue 49
A1): a body naming the id of a message not sent yet does not make a receiver drop that
message. The same story runs on every host's transcript format (tests/pi, tests/claude,
tests/clis)."""

from __future__ import annotations

import json

import pytest
from conftest import wait_until
from fg import forged_id_story, in_thread, keyed_id, run_async, session, spawn, taken

from roost_core.protocol import KEY_REUSED, ProtocolError
from roost_plugins.envelope import parse_envelopes


def test_a_forged_id_in_a_body_does_not_hide_the_real_message_after_a_worker_kill(daemon_factory, tmp_path):
    daemon = daemon_factory().start()
    kid = forged_id_story(daemon, tmp_path, "scripted")
    bodies = [parse_envelopes(e["content"])[0]["body"] for e in daemon.entries(kid) if e.get("type") == "custom_message"]
    assert bodies.count("the real message") == 1, bodies
    # The worker's record holds the id of each message it handed over, by seq.
    record = [json.loads(line) for line in (daemon.paths.jobs_dir / f"{kid}.ids").read_text().splitlines()]
    assert len({entry["id"] for entry in record}) == 2


# ------------------------------------------------------------------ a key names one request


def test_a_key_asked_again_with_another_request_is_refused_key_reused(daemon_factory, tmp_path):
    """Issue 49 A2: a key asked again with another receiver or text is refused
    ``key_reused`` (naming the first request's receiver), not answered ``ok`` with the
    first answer while the new text is never delivered; after a daemon restart too. The
    same request asked again still gets its first answer."""
    daemon = daemon_factory().start()
    quiet = {"default": {"steps": [{"say": "ok: {input}"}]}}
    first = daemon.start_job("a", name="first", scenario=quiet)
    second = daemon.start_job("b", name="second", scenario=quiet)
    for job in (first, second):
        daemon.wait_job(job)

    # The user's connections (one caller): `reply`, as the CLI asks it.
    answered = daemon.call("reply", job=first, text="to the first", key="user-key")
    with pytest.raises(ProtocolError) as refused:
        daemon.call("reply", job=second, text="to the second", key="user-key")
    assert refused.value.code == KEY_REUSED and f"reply to {first}" in str(refused.value)
    with pytest.raises(ProtocolError) as refused:
        daemon.call("reply", job=first, text="other words", key="user-key")
    assert refused.value.code == KEY_REUSED
    assert daemon.call("reply", job=first, text="to the first", key="user-key", again=True) == answered

    # A session's `send`.
    async def story() -> None:
        async with session(daemon, tmp_path) as lead:
            kid = await spawn(lead, "c", "kid", scenario=quiet)
            sent = await lead.call("send", to=kid, message="one", key="send-key")
            with pytest.raises(ProtocolError) as refused:
                await lead.call("send", to=first, message="one", key="send-key")
            assert refused.value.code == KEY_REUSED and f"send to {kid}" in str(refused.value)
            await in_thread(daemon.wait_job, kid)
            assert daemon.received(first, "one") is None
            daemon.terminate()
            daemon.restart()
            with pytest.raises(ProtocolError) as refused:
                await lead.call("send", to=kid, message="two", key="send-key")
            assert refused.value.code == KEY_REUSED
            assert await lead.call("send", to=kid, message="one", key="send-key") == sent

    run_async(story)
    with pytest.raises(ProtocolError) as refused:
        daemon.call("reply", job=second, text="to the second", key="user-key")
    assert refused.value.code == KEY_REUSED


def test_a_forged_id_in_a_body_does_not_hide_the_real_message_from_a_foreground_session(daemon_factory, write_config, tmp_path):
    """The foreground API's session file: it holds, after its process started again, only
    the ids of its own agent-message entries (``details.id``), not one a body names."""
    write_config({"agentExternalMessages": True})
    daemon = daemon_factory().start()

    async def story() -> None:
        async with session(daemon, tmp_path, name="talker") as talker:
            await talker.ensure_registered()
            forged = keyed_id(daemon, talker.peer_id, "the-real-one")
            async with session(daemon, tmp_path, name="listener") as listener:
                await listener.ensure_registered()
                ok = await talker.call("send", to=listener.peer_id, message=f'see msg="{forged}" here')
                assert ok["result"] == "delivered"
                await listener.wait_for_delivery(1)
                await in_thread(wait_until, lambda: taken(daemon, listener), what="acked")
            # The listener's process starts again on its session file.
            async with session(daemon, tmp_path, name="listener") as listener:
                await listener.ensure_registered()
                real = await talker.call("send", to=listener.peer_id, message="the real message", key="the-real-one")
                assert real["id"] == forged
                await listener.wait_for_delivery(1)
                assert "the real message" in listener.delivered[0]["content"]

    run_async(story)
