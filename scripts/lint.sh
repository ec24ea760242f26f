#!/usr/bin/env bash
# Lint and type-check the tree with the pinned tools in .venv (the `test` extra):
#
#   scripts/lint.sh
#
# ruff checks src, tests, bench and examples ([tool.ruff] in pyproject.toml); mypy checks
# roost_core and roost_plugins strictly ([tool.mypy]). Exits non-zero on any finding of
# either (both always run, so one run shows everything); prints one OK line when clean.
# scripts/test.sh runs it first, in the full and the --fast mode.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

py=.venv/bin/python
if [[ ! -x $py ]]; then
    echo "scripts/lint.sh: no .venv here; scripts/test.sh creates it" >&2
    exit 2
fi

ruff_status=0
"$py" -m ruff check --quiet . || ruff_status=$?
mypy_status=0
"$py" -m mypy --no-error-summary || mypy_status=$?

if [[ $ruff_status -ne 0 || $mypy_status -ne 0 ]]; then
    echo "scripts/lint.sh: FAILED: ruff exited $ruff_status, mypy exited $mypy_status" >&2
    exit 1
fi
echo "scripts/lint.sh: OK (ruff, mypy --strict)"
