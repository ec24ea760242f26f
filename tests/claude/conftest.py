"""The Claude test kit: the real Claude Code (tests/claude/node_modules, from
scripts/install-claude.sh), a fake Anthropic Messages API on 127.0.0.1, and an isolated
HOME for every test.

Every Claude test isolates HOME and TMPDIR, drops inherited ``*_API_KEY``, ``ANTHROPIC_*``
and ``CLAUDE*`` variables, sets a fake key and the variables that turn off telemetry,
updates and error reports, and talks only to 127.0.0.1. The tests skip when Claude Code is
not installed, unless ``ROOST_REQUIRE_CLAUDE=1`` (CI), where a missing one fails them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parent.parent / "pi"))

from claudekit import ClaudeKit, need_claude
from hostkit import kit_fixtures

claude_bin, claude_kit = kit_fixtures(ClaudeKit, need_claude, "claude")


@pytest.fixture
def mixed_kits(tmp_path, roost_env, daemon_factory, claude_bin):
    """The pi kit and the Claude kit on one environment (pi first: the Claude kit keeps the
    pi fake's key and sets HOME last; pi finds its own files through PI_CODING_AGENT_DIR)."""
    from pikit import PiKit, need_pi

    pi = need_pi()
    pi_kit = PiKit(tmp_path, roost_env, daemon_factory, pi)
    claude_kit = ClaudeKit(tmp_path, roost_env, daemon_factory, claude_bin)
    yield pi_kit, claude_kit
    try:
        claude_kit.cleanup()
    finally:
        pi_kit.cleanup()
