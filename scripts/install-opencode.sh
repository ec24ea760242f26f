#!/usr/bin/env bash
# Install the pinned OpenCode (tests/opencode/package-lock.json) that tests/clis/test_opencode.py runs.
#
#   scripts/install-opencode.sh
#
# `npm install --no-save` in tests/opencode (see install-pinned.sh): exactly the locked
# opencode-ai, whose native (bun) binary comes in the optional dependency opencode-linux-x64
# (or the one for this platform). Skips the install when the locked version is already there. The tests find it at
# tests/opencode/node_modules/.bin/opencode (or $ROOST_OPENCODE_BIN).
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/install-pinned.sh" opencode opencode-ai opencode "OpenCode" install
