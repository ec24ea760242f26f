#!/usr/bin/env bash
# Set up (when needed) and run the test suite.
#
#   scripts/test.sh [PYTEST ARGS...]          the full run (the README's and CI's)
#   scripts/test.sh --fast [PYTEST ARGS...]   unit, plugin and smoke system tests, under a minute
#   scripts/test.sh --portable [PYTEST ARGS...]   unit, system and reliability tiers on the
#                                                 portable platform (CI's third run)
#   scripts/test.sh --bench [PYTEST ARGS...]      the benchmarks' smoke runs (CI's second run)
#
# Every mode first runs scripts/lint.sh (ruff over the tree, mypy --strict over roost_core
# and roost_plugins) and stops there on any finding.
#
# Full run: every test in tests/ under coverage (the daemon and worker subprocesses
# included: [tool.coverage.run] patch), spread over one pytest worker per core
# (pytest-xdist, -n auto; each test has its own home, daemon and processes, so tests do
# not meet; `-n 0` in PYTEST ARGS runs them in one process), then the example plugins'
# own tests (examples/plugins/*) in a venv of their own, .venv-examples, so that the user's .venv
# keeps the default plugins and `roost demo` frames messages as it always does. Prints
# the 15 slowest tests. Fails when a test fails, when no test ran (pytest exit 5), or
# when line coverage of src is below 85%. PYTEST ARGS go to the run of tests/.
#
# --fast: tests/unit, tests/plugins and the system tests marked `smoke`, no coverage, no
# examples: a quick check while working, not a substitute for the full run.
#
# --portable: tests/unit, tests/system and tests/reliability with ROOST_PLATFORM=portable
# (roost_core/platform's portable implementation on Linux too: no subreaper, no pidfds,
# psutil's process table, sync after write; docs/reliability.md, "Platforms"), spread over
# the cores as the full run is; no coverage floor and no examples (the full run checks
# those, and a subset of the tiers covers less of src). Fails when a test fails or none ran.
#
# --bench: the tests marked `bench` (pytest --bench), left out of the other modes: each
# benchmark of bench/ in its smallest configuration, the real-pi one included, checked
# for its rows, figures and same-run baselines (they time nothing). No coverage.
#
# Creates .venv with the package and its test extras if that was not done yet (or
# pyproject.toml changed since); it installs nothing else there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

fast=0
portable=0
bench=0
if [[ ${1:-} == "--fast" ]]; then
    fast=1
    shift
elif [[ ${1:-} == "--portable" ]]; then
    portable=1
    shift
elif [[ ${1:-} == "--bench" ]]; then
    bench=1
    shift
fi

# ensure_venv DIR STAMP PIP-ARGS...: make DIR a venv holding PIP-ARGS, once per change of
# the pyproject files named by the stamp's check (one pip run, so the examples' dependency
# "roost" is this checkout, never a PyPI lookup).
ensure_venv() {
    local venv=$1 stamp=$1/.roost-test-installed check=$2
    shift 2
    if [[ ! -x $venv/bin/python ]]; then
        python3 -m venv "$venv"
    fi
    local stale=0
    for file in pyproject.toml examples/plugins/*/pyproject.toml; do
        [[ $file -nt $stamp ]] && stale=1
    done
    if [[ ! -f $stamp || $stale -eq 1 ]] || ! "$venv/bin/python" -c "$check" 2>/dev/null; then
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
        touch "$stamp"
    fi
}

ensure_venv .venv 'import roost_core, pytest, coverage, hypothesis, xdist, mypy, ruff' -e '.[test]'
py=.venv/bin/python

scripts/lint.sh

if [[ $fast -eq 1 ]]; then
    "$py" -m pytest -q tests/unit tests/plugins tests/system -m smoke "$@"
    echo "scripts/test.sh --fast: OK"
    exit 0
fi

if [[ $bench -eq 1 ]]; then
    status=0
    "$py" -m pytest -n auto --bench -m bench tests "$@" || status=$?
    if [[ $status -ne 0 ]]; then
        echo "scripts/test.sh --bench: FAILED: pytest exited $status" >&2
        exit "$status"
    fi
    echo "scripts/test.sh --bench: OK"
    exit 0
fi

if [[ $portable -eq 1 ]]; then
    status=0
    ROOST_PLATFORM=portable "$py" -m pytest -n auto --dist worksteal --durations=15 tests/unit tests/system tests/reliability "$@" || status=$?
    if [[ $status -ne 0 ]]; then
        echo "scripts/test.sh --portable: FAILED: pytest exited $status" >&2
        exit "$status"
    fi
    echo "scripts/test.sh --portable: OK"
    exit 0
fi

"$py" -m coverage erase
# What .venv holds before the tests: they must leave it as they found it.
before=$("$py" -m pip freeze --disable-pip-version-check 2>/dev/null)
pytest_status=0
"$py" -m coverage run -m pytest -n auto --dist worksteal --durations=15 "$@" || pytest_status=$?

examples_status=0
ensure_venv .venv-examples 'import roost_core, pytest, coverage, roost_repo_reach, roost_json_envelope, roost_peek, roost_command_host' \
    -e '.[test]' -e examples/plugins/repo-reach -e examples/plugins/json-envelope -e examples/plugins/peek-tool \
    -e examples/plugins/command-host
.venv-examples/bin/python -m coverage run -m pytest -q examples/plugins || examples_status=$?

venv_status=0
if [[ $("$py" -m pip freeze --disable-pip-version-check 2>/dev/null) != "$before" ]]; then
    echo "scripts/test.sh: the test run changed what .venv holds:" >&2
    diff <(echo "$before") <("$py" -m pip freeze --disable-pip-version-check 2>/dev/null) >&2 || true
    venv_status=1
fi

report_status=0
if "$py" -m coverage combine --quiet; then
    "$py" -m coverage report --fail-under=85 || report_status=$?
else
    echo "scripts/test.sh: no coverage data to combine" >&2
    report_status=1
fi

if [[ $pytest_status -eq 5 || $examples_status -eq 5 ]]; then
    echo "scripts/test.sh: FAILED: no tests ran (pytest exit 5)" >&2
    exit 5
elif [[ $pytest_status -ne 0 ]]; then
    echo "scripts/test.sh: FAILED: pytest exited $pytest_status" >&2
    exit "$pytest_status"
elif [[ $examples_status -ne 0 ]]; then
    echo "scripts/test.sh: FAILED: the example plugins' tests (.venv-examples) exited $examples_status" >&2
    exit "$examples_status"
elif [[ $venv_status -ne 0 ]]; then
    echo "scripts/test.sh: FAILED: the tests changed the user's .venv" >&2
    exit 1
elif [[ $report_status -ne 0 ]]; then
    echo "scripts/test.sh: FAILED: coverage below 85% (or no coverage data)" >&2
    exit "$report_status"
fi
echo "scripts/test.sh: OK"
