#!/usr/bin/env bash
# Install the pinned Gemini CLI (tests/gemini/package-lock.json) that tests/clis/test_gemini.py runs.
#
#   scripts/install-gemini.sh
#
# `npm ci` in tests/gemini: exactly the locked @google/gemini-cli (bundled JavaScript, runs
# on Node 20). Skips the install when the locked version is already there. The tests find
# it at tests/gemini/node_modules/.bin/gemini (or $ROOST_GEMINI_BIN).
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/install-pinned.sh" gemini @google/gemini-cli gemini "Gemini CLI"
