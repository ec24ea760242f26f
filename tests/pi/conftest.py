"""The pi test kit: the real pi (tests/pi/node_modules, from scripts/install-pi.sh), a fake
OpenAI-compatible model on 127.0.0.1, and an isolated pi home for every test.

Every pi test isolates HOME, PI_CODING_AGENT_DIR and TMPDIR, sets PI_OFFLINE=1, drops
``*_API_KEY`` and talks only to 127.0.0.1. The tests skip when pi is not installed, unless
``ROOST_REQUIRE_PI=1`` (CI), where a missing pi fails them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parent))

from pikit import PiKit, need_pi


@pytest.fixture
def pi_bin() -> str:
    return need_pi()


@pytest.fixture
def pi_kit(tmp_path, roost_env, daemon_factory, pi_bin):
    kit = PiKit(tmp_path, roost_env, daemon_factory, pi_bin)
    yield kit
    kit.cleanup()


