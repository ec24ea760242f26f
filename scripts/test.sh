#!/usr/bin/env bash
# Set up (when needed) and run the whole test suite with a coverage report.
#
#   scripts/test.sh [PYTEST ARGS...]
#
# Creates .venv and installs the package with its test extras, and the example plugins
# (examples/plugins/*, whose tests run too), if that was not done yet (or a pyproject.toml
# changed since). Coverage includes the daemon and worker subprocesses
# ([tool.coverage.run] patch = ["subprocess"]). Fails when a test fails, when no test ran
# (pytest exit 5), or when line coverage of src is below 85%.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

venv=.venv
stamp=$venv/.roost-test-installed
if [[ ! -x $venv/bin/python ]]; then
    python3 -m venv "$venv"
fi
# One pip run, so the examples' dependency "roost" is this checkout, never a PyPI lookup.
examples=(-e examples/plugins/repo-reach -e examples/plugins/json-envelope)
if [[ ! -f $stamp || pyproject.toml -nt $stamp || examples/plugins/repo-reach/pyproject.toml -nt $stamp \
      || examples/plugins/json-envelope/pyproject.toml -nt $stamp ]] \
   || ! "$venv/bin/python" -c 'import roost_core, pytest, coverage, roost_repo_reach, roost_json_envelope' 2>/dev/null; then
    "$venv/bin/python" -m pip install --quiet -e '.[test]' "${examples[@]}"
    touch "$stamp"
fi

py=$venv/bin/python
"$py" -m coverage erase
pytest_status=0
"$py" -m coverage run -m pytest "$@" || pytest_status=$?

report_status=0
if "$py" -m coverage combine --quiet; then
    "$py" -m coverage report --fail-under=85 || report_status=$?
else
    echo "scripts/test.sh: no coverage data to combine" >&2
    report_status=1
fi

if [[ $pytest_status -eq 5 ]]; then
    echo "scripts/test.sh: FAILED: no tests ran (pytest exit 5)" >&2
    exit 5
elif [[ $pytest_status -ne 0 ]]; then
    echo "scripts/test.sh: FAILED: pytest exited $pytest_status" >&2
    exit "$pytest_status"
elif [[ $report_status -ne 0 ]]; then
    echo "scripts/test.sh: FAILED: coverage below 85% (or no coverage data)" >&2
    exit "$report_status"
fi
echo "scripts/test.sh: OK"
