#!/usr/bin/env bash
# Run the test suite several times under CPU contention and count failures per test.
#
#   scripts/stress-tests.sh [-n RUNS] [-j BUSY] [PYTEST ARGS...]
#
# Starts BUSY busy loops (default: one per core, `nproc`) at the tests' own priority, then
# runs pytest RUNS times (default 5) while they spin, on one pytest worker per core as
# scripts/test.sh does (-n auto; `-- -n 0 ...` after the script's options for one process).
# With no PYTEST ARGS a run is tests/ and the example plugins' tests in .venv-examples, as
# in scripts/test.sh. Each run has its own JUnit XML report; the script prints each run's
# counts and every test that failed at least once with how many times. Exits 1 when any
# test failed (or a run crashed), 0 otherwise. The busy loops end with the script,
# however it ends.
#
# Examples:
#   scripts/stress-tests.sh                             # the whole suite, 5 runs, busy loops on every core
#   scripts/stress-tests.sh -n 20 tests/system          # one folder, 20 runs
#   scripts/stress-tests.sh -n 3 -j 4 -- -k stopping    # harder contention, a few tests
#   scripts/stress-tests.sh -n 3 -- -n 0 tests/unit     # one pytest process
#
# Uses .venv (made by scripts/test.sh); no coverage, so a run is as the test command's
# without its report. The runs' XML reports stay in $STRESS_OUT (default: a temp dir).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

runs=5
busy=$(nproc)
while getopts "n:j:" opt; do
    case $opt in
        n) runs=$OPTARG ;;
        j) busy=$OPTARG ;;
        *) echo "usage: scripts/stress-tests.sh [-n RUNS] [-j BUSY] [PYTEST ARGS...]" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))

py=.venv/bin/python
if ! "$py" -c 'import roost_core, pytest, xdist' 2>/dev/null; then
    echo "scripts/stress-tests.sh: no test environment in .venv; run scripts/test.sh once first" >&2
    exit 2
fi

out=${STRESS_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/roost-stress.XXXXXX")}
mkdir -p "$out"

spinners=()
stop_spinners() {
    for pid in "${spinners[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
}
trap stop_spinners EXIT
for _ in $(seq "$busy"); do
    # A process of its own that never sleeps: it competes for a core like any test process.
    "$py" -c 'while True: pass' &
    spinners+=($!)
done

echo "stress: $runs run(s) of pytest ${*:-(the whole suite)} under $busy busy loop(s) on $(nproc) core(s); reports in $out"
crashed=0
for run in $(seq "$runs"); do
    began=$(date +%s)
    status=0
    "$py" -m pytest -q -p no:cacheprovider -n auto --dist worksteal --junitxml="$out/run-$run.xml" "$@" >"$out/run-$run.log" 2>&1 || status=$?
    summary=$(tail -n 1 "$out/run-$run.log")
    # The whole suite includes the example plugins' tests, in their own venv (scripts/test.sh).
    if [[ $# -eq 0 && -x .venv-examples/bin/python ]]; then
        examples=0
        .venv-examples/bin/python -m pytest -q -p no:cacheprovider --junitxml="$out/run-$run-examples.xml" examples/plugins \
            >"$out/run-$run-examples.log" 2>&1 || examples=$?
        summary="$summary; examples: $(tail -n 1 "$out/run-$run-examples.log")"
        [[ $status -eq 0 ]] && status=$examples
    fi
    took=$(( $(date +%s) - began ))
    echo "run $run/$runs: exit $status, ${took}s: $summary"
    # 0 = all passed, 1 = some failed (counted below); anything else is a crashed run.
    if [[ $status -ne 0 && $status -ne 1 ]]; then
        crashed=1
    fi
done
stop_spinners

summary_status=0
"$py" - "$out" "$runs" <<'PY' || summary_status=$?
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

out, runs = Path(sys.argv[1]), int(sys.argv[2])
failures: Counter[str] = Counter()
executed = 0
for run in range(1, runs + 1):
    report = out / f"run-{run}.xml"
    if not report.exists():
        print(f"run {run}: no report (the run crashed before writing one)")
        failures["<run crashed>"] += 1
        continue
    reports = [report] + ([examples] if (examples := out / f"run-{run}-examples.xml").exists() else [])
    for case in (case for path in reports for case in ET.parse(path).getroot().iter("testcase")):
        executed += 1
        if case.find("failure") is not None or case.find("error") is not None:
            failures[f"{case.get('classname')}::{case.get('name')}"] += 1
print(f"per-test failures over {runs} run(s), {executed} test executions:")
if not failures:
    print("  none")
for name, count in failures.most_common():
    print(f"  {count}/{runs}  {name}")
sys.exit(1 if failures else 0)
PY
[[ $crashed -eq 0 && $summary_status -eq 0 ]]
