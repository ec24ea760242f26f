#!/usr/bin/env bash
# The working day alone: ROOST_SOAK_MINUTES (default 30) of mixed traffic with daemon and
# worker restarts, then the accounting and the RSS/fd samples (tests/reliability/test_working_day.py).
#
#   scripts/soak.sh [RESULTS.json]        # default: soak-results.json in the current folder
#   ROOST_SOAK_MINUTES=5 scripts/soak.sh  # a shorter day, same proportions
#
# Prints the reliability table row and every minute's sample; keeps the results JSON (the
# samples are in it) and leaves docs/reliability.md as it is.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
results=$(realpath -m "${1:-soak-results.json}")
export ROOST_SOAK_MINUTES=${ROOST_SOAK_MINUTES:-30}
exec .venv/bin/python -m tests.reliability.report --soak --no-write --keep "$results" -- -k working_day -s
