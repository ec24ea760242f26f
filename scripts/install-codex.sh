#!/usr/bin/env bash
# Install the pinned Codex CLI (tests/codex/package-lock.json) that tests/clis/test_codex.py runs.
#
#   scripts/install-codex.sh
#
# `npm ci` in tests/codex: exactly the locked @openai/codex, whose native binary comes in
# the optional dependency @openai/codex-linux-x64 (or the one for this platform). Skips the
# install when the locked version is already there. The tests find it at
# tests/codex/node_modules/.bin/codex (or $ROOST_CODEX_BIN).
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/install-pinned.sh" codex @openai/codex codex "Codex CLI"
