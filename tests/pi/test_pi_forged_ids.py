"""A message id is read only from what roost wrote (issue 49 A1), on pi's session format:
a body naming the id of a message not sent yet does not make a pi job's new worker (after
a ``kill -9``) drop that message (``fg.forged_id_story``)."""

from __future__ import annotations

from fg import forged_id_story


def test_a_forged_id_in_a_body_does_not_hide_the_real_message_from_a_pi_job(pi_kit, tmp_path):
    pi_kit.fake({"default": {"steps": [{"say": "ok: {input}"}]}})
    daemon = pi_kit.daemon()
    kid = forged_id_story(daemon, tmp_path, "pi")
    texts = [str(entry.get("content")) for entry in daemon.entries(kid) if entry.get("type") == "custom_message"]
    assert sum("the real message" in text for text in texts) == 1, texts
