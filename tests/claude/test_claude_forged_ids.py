"""A message id is read only from what roost wrote (issue 49 A1), on Claude Code's
transcript format: a body naming the id of a message not sent yet does not make a claude
job's new worker (after a ``kill -9``) drop that message (``fg.forged_id_story``)."""

from __future__ import annotations

from fg import forged_id_story


def test_a_forged_id_in_a_body_does_not_hide_the_real_message_from_a_claude_job(claude_kit, tmp_path):
    fake = claude_kit.fake({"default": {"steps": [{"say": "ok: {input}"}]}})
    daemon = claude_kit.daemon()
    forged_id_story(daemon, tmp_path, "claude")
    assert "the real message" in str(fake.requests()[-1]["raw"])
