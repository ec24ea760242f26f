"""The agent-CLI kits (Codex, Gemini CLI, OpenCode, Qwen Code): each pinned real CLI in an
isolated world talking only to a fake model on 127.0.0.1.

A CLI's tests skip when it is not installed, unless ``ROOST_REQUIRE_<CLI>=1`` (CODEX,
GEMINI, OPENCODE, QWEN; CI sets them), where a missing one fails them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parent))
# The fakes here stand on tests/fakemodel.py and answer with the pi kit's scripted model
# (tests/pi/fake_openai.py).
sys.path.append(str(Path(__file__).resolve().parent.parent))
sys.path.append(str(Path(__file__).resolve().parent.parent / "pi"))

from codexkit import CodexKit, codex_bin


def kept_until_done(kit):
    """Yield ``kit`` to the test, then stop its fake model server if the test started one."""
    yield kit
    if kit.fake is not None:
        kit.fake.stop()


@pytest.fixture
def codex(tmp_path):
    yield from kept_until_done(CodexKit(tmp_path, codex_bin()))


@pytest.fixture
def codex_roost(tmp_path, roost_env):
    """A Codex world joined to the test's roost environment (``roost_env``): the daemon
    started from ``daemon_factory`` runs ``--host codex`` jobs on the pinned Codex."""
    kit = CodexKit(tmp_path, codex_bin())
    kit.join_roost(roost_env)
    yield from kept_until_done(kit)


@pytest.fixture
def gemini(tmp_path):
    from geminikit import GeminiKit, gemini_bin

    yield from kept_until_done(GeminiKit(tmp_path, gemini_bin()))


@pytest.fixture
def opencode(tmp_path):
    from opencodekit import OpenCodeKit, opencode_bin

    yield from kept_until_done(OpenCodeKit(tmp_path, opencode_bin()))


@pytest.fixture
def qwen(tmp_path):
    from qwenkit import QwenKit, qwen_bin

    yield from kept_until_done(QwenKit(tmp_path, qwen_bin()))


@pytest.fixture
def qwen_host(tmp_path, roost_env, daemon_factory):
    """roost's ``qwen`` host world (``qwenkit.QwenHostKit``): the daemon's environment
    runs the pinned Qwen Code against the fake."""
    from qwenkit import QwenHostKit, qwen_bin

    kit = QwenHostKit(tmp_path, roost_env, daemon_factory, qwen_bin())
    yield kit
    kit.cleanup()


@pytest.fixture
def gemini_host(tmp_path, roost_env, daemon_factory):
    """A daemon world whose jobs run the pinned Gemini CLI (``geminikit.GeminiHostKit``)."""
    from geminikit import GeminiHostKit, gemini_bin

    kit = GeminiHostKit(tmp_path, roost_env, daemon_factory, gemini_bin())
    yield kit
    if kit.fake is not None:
        kit.fake.stop()
        assert not kit.fake.violations, kit.fake.violations
