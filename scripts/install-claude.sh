#!/usr/bin/env bash
# Install the pinned Claude Code (tests/claude/package-lock.json) that the Claude tests run.
#
#   scripts/install-claude.sh
#
# `npm ci` in tests/claude: exactly the locked version, from the npm registry only (the
# native binary comes in the optional dependency @anthropic-ai/claude-code-linux-x64).
# Claude Code 2.1.332 declares node >= 22; on Node 20 npm warns EBADENGINE and installs it
# all the same: the CLI is a native binary, Node's version does not matter when it runs.
# Skips the install when the locked version is already there. The Claude tests find it at
# tests/claude/node_modules/.bin/claude (or $ROOST_CLAUDE_BIN).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../tests/claude"

want=$(node -e 'console.log(require("./package-lock.json").packages["node_modules/@anthropic-ai/claude-code"].version)')
have=$(node -e 'try { console.log(require("./node_modules/@anthropic-ai/claude-code/package.json").version) } catch { console.log("") }')
if [[ -x node_modules/.bin/claude && "$have" == "$want" ]]; then
    echo "Claude Code $have already installed in tests/claude"
    exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
echo "Claude Code $(node -e 'console.log(require("./node_modules/@anthropic-ai/claude-code/package.json").version)') installed in tests/claude"
