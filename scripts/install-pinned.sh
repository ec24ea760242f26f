#!/usr/bin/env bash
# Install one pinned npm CLI that roost's tests run (used by install-codex.sh,
# install-gemini.sh, install-opencode.sh and install-qwen.sh).
#
#   scripts/install-pinned.sh DIR PACKAGE BIN LABEL [ci|install]
#
# `npm ci` in tests/DIR: exactly the versions in tests/DIR/package-lock.json, from the npm
# registry only. With `install` (OpenCode, Qwen Code): `npm install --no-save`, which
# installs the same locked versions, checked against the lock's integrity, and leaves the
# lock alone; needed where the lock lists only this platform's optional native packages
# (the registry the locks were made from lacked the other platforms' ones, and `npm ci`
# refuses a lock that misses an optional dependency). Skips the install when the locked
# version is already there and tests/DIR/node_modules/.bin/BIN exists.
set -euo pipefail
dir=$1 package=$2 bin=$3 label=$4 mode=${5:-ci}
cd "$(dirname "${BASH_SOURCE[0]}")/../tests/$dir"

want=$(node -e 'console.log(require("./package-lock.json").packages["node_modules/" + process.argv[1]].version)' "$package")
have=$(node -e 'try { console.log(require("./node_modules/" + process.argv[1] + "/package.json").version) } catch { console.log("") }' "$package")
if [[ -x "node_modules/.bin/$bin" && "$have" == "$want" ]]; then
    echo "$label $have already installed in tests/$dir"
    exit 0
fi
if [[ "$mode" == install ]]; then
    npm install --no-save --no-audit --no-fund --loglevel=error
else
    npm ci --no-audit --no-fund --loglevel=error
fi
echo "$label $(node -e 'console.log(require("./node_modules/" + process.argv[1] + "/package.json").version)' "$package") installed in tests/$dir"
