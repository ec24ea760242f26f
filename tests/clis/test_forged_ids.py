"""A message id is read only from what roost wrote (issue 49 A1), on the session formats
of Codex, Gemini CLI, OpenCode and Qwen Code: a body naming the id of a message not sent
yet does not make a job's new worker (after a ``kill -9``) drop that message
(``fg.forged_id_story``; the scripted host's, pi's and Claude Code's are in
tests/system, tests/pi and tests/claude)."""

from __future__ import annotations

import pytest
from fg import forged_id_story
from opencodekit import OpenCodeKit, opencode_bin

# Each story starts its CLI twice (the worker is killed between) on a loaded machine.
pytestmark = pytest.mark.timeout(300)
QUIET = {"default": {"steps": [{"say": "ok: {input}"}]}}


@pytest.fixture
def opencode_world(tmp_path, roost_env, daemon_factory):
    """The OpenCode kit's world shared with a roost daemon (as test_opencode_host.py's)."""
    kit = OpenCodeKit(tmp_path, opencode_bin())
    keep = {key: roost_env[key] for key in ("PATH",) if key in roost_env}
    roost_env.update(kit.env)
    roost_env.update(keep)
    roost_env["ROOST_OPENCODE_BIN"] = kit.binary
    kit.roost_env = roost_env
    kit.daemon_factory = daemon_factory
    yield kit
    if kit.fake is not None:
        kit.fake.stop()
        assert not kit.fake.violations, kit.fake.violations


def test_a_forged_id_does_not_hide_the_real_message_from_a_codex_job(codex_roost, daemon_factory, tmp_path):
    codex_roost.start_fake(QUIET)
    codex_roost.configure()
    forged_id_story(daemon_factory().start(), tmp_path, "codex", timeout=120)


def test_a_forged_id_does_not_hide_the_real_message_from_a_gemini_job(gemini_host, tmp_path):
    gemini_host.start_fake(QUIET)
    forged_id_story(gemini_host.daemon(), tmp_path, "gemini", timeout=120)


def test_a_forged_id_does_not_hide_the_real_message_from_an_opencode_job(opencode_world, tmp_path):
    world = opencode_world
    world.start_fake(QUIET, servers=("pingsrv", "roost"))
    world.configure()
    world.roost_env.update({k: v for k, v in world.env.items() if k.startswith(("XDG_", "OPENCODE_"))})
    forged_id_story(world.daemon_factory().start(), tmp_path, "opencode", timeout=120, cwd=str(world.work))


def test_a_forged_id_does_not_hide_the_real_message_from_a_qwen_job(qwen_host, tmp_path):
    qwen_host.fake(QUIET)
    forged_id_story(qwen_host.daemon(), tmp_path, "qwen", timeout=120)
