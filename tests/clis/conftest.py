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


@pytest.fixture
def codex(tmp_path):
    kit = CodexKit(tmp_path, codex_bin())
    yield kit
    if kit.fake is not None:
        kit.fake.stop()


@pytest.fixture
def gemini(tmp_path):
    from geminikit import GeminiKit, gemini_bin

    kit = GeminiKit(tmp_path, gemini_bin())
    yield kit
    if kit.fake is not None:
        kit.fake.stop()


@pytest.fixture
def opencode(tmp_path):
    from opencodekit import OpenCodeKit, opencode_bin

    kit = OpenCodeKit(tmp_path, opencode_bin())
    yield kit
    if kit.fake is not None:
        kit.fake.stop()


@pytest.fixture
def qwen(tmp_path):
    from qwenkit import QwenKit, qwen_bin

    kit = QwenKit(tmp_path, qwen_bin())
    yield kit
    if kit.fake is not None:
        kit.fake.stop()
