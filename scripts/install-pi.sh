#!/usr/bin/env bash
# Install the pinned pi coding agent (tests/pi/package-lock.json) that the pi tests run.
#
#   scripts/install-pi.sh
#
# `npm ci` in tests/pi: exactly the locked versions, from the npm registry only. Needs
# node >= 20.18.1 and npm. Skips the install when the locked pi is already there.
# The pi tests find it at tests/pi/node_modules/.bin/pi (or $ROOST_PI_BIN).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../tests/pi"

want=$(node -e 'console.log(require("./package-lock.json").packages["node_modules/@mariozechner/pi-coding-agent"].version)')
have=$(node -e 'try { console.log(require("./node_modules/@mariozechner/pi-coding-agent/package.json").version) } catch { console.log("") }')
if [[ -x node_modules/.bin/pi && "$have" == "$want" ]]; then
    echo "pi $have already installed in tests/pi"
    exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
echo "pi $(node -e 'console.log(require("./node_modules/@mariozechner/pi-coding-agent/package.json").version)') installed in tests/pi"
