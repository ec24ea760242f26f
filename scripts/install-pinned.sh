#!/usr/bin/env bash
# Install one pinned npm CLI that roost's tests run (used by install-codex.sh,
# install-gemini.sh, install-opencode.sh and install-qwen.sh).
#
#   scripts/install-pinned.sh DIR PACKAGE BIN LABEL
#
# `npm ci` in tests/DIR: exactly the version in tests/DIR/package-lock.json, from the npm
# registry only. Skips the install when the locked version is already there and
# tests/DIR/node_modules/.bin/BIN exists.
set -euo pipefail
dir=$1 package=$2 bin=$3 label=$4
cd "$(dirname "${BASH_SOURCE[0]}")/../tests/$dir"

want=$(node -e 'console.log(require("./package-lock.json").packages["node_modules/" + process.argv[1]].version)' "$package")
have=$(node -e 'try { console.log(require("./node_modules/" + process.argv[1] + "/package.json").version) } catch { console.log("") }' "$package")
if [[ -x "node_modules/.bin/$bin" && "$have" == "$want" ]]; then
    echo "$label $have already installed in tests/$dir"
    exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
echo "$label $(node -e 'console.log(require("./node_modules/" + process.argv[1] + "/package.json").version)' "$package") installed in tests/$dir"
