"""The pi test kit: the real pi (tests/pi/node_modules, from scripts/install-pi.sh), a fake
OpenAI-compatible model on 127.0.0.1, and an isolated pi home for every test.

Every pi test isolates HOME, PI_CODING_AGENT_DIR and TMPDIR, sets PI_OFFLINE=1, drops
``*_API_KEY`` and talks only to 127.0.0.1. The tests skip when pi is not installed, unless
``ROOST_REQUIRE_PI=1`` (CI), where a missing pi fails them.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent))

from hostkit import kit_fixtures
from pikit import PiKit, need_pi

pi_bin, pi_kit = kit_fixtures(PiKit, need_pi, "pi")
