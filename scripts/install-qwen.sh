#!/usr/bin/env bash
# Install the pinned Qwen Code (tests/qwen/package-lock.json) that tests/clis/test_qwen.py runs.
#
#   scripts/install-qwen.sh
#
# `npm install --no-save` in tests/qwen (see install-pinned.sh): exactly the locked
# @qwen-code/qwen-code. It declares node >= 22; on Node 20 npm warns EBADENGINE and
# installs it all the same, and everything roost relies on works there (tests/clis/test_qwen.py). Skips the install when the locked version is
# already there. The tests find it at tests/qwen/node_modules/.bin/qwen (or $ROOST_QWEN_BIN).
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/install-pinned.sh" qwen @qwen-code/qwen-code qwen "Qwen Code" install
