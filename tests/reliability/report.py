"""Run the reliability suite and write its results table into ``docs/reliability.md``.

    .venv/bin/python -m tests.reliability.report            # run, print, update the doc
    .venv/bin/python -m tests.reliability.report --soak     # the long soak
    .venv/bin/python -m tests.reliability.report --from results.json   # no run: render a file
    .venv/bin/python -m tests.reliability.report --no-write -- -k crash  # extra pytest args

The suite records one row per checked thing (``record`` fixture, see conftest.py) in a
JSON file; this turns it into a Markdown table (area, case, runs, messages, cases,
outcome, detail) and replaces the part of the doc between the two result markers.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "reliability.md"
BEGIN = "<!-- reliability-results:begin -->"
END = "<!-- reliability-results:end -->"
SECTIONS = ["crash point", "load", "bad input", "property", "security", "disk", "fds", "corrupt file", "working day"]


#: Where a test that recorded nothing goes, by a part of its node id.
NODE_SECTIONS = [
    ("test_load", "load"), ("crash", "crash point"), ("security", "security"), ("properties", "property"),
    ("disk_faults", "disk"), ("fd_exhaustion", "fds"), ("corrupt_files", "corrupt file"), ("working_day", "working day"),
]


def run_suite(results: Path, soak: bool, extra: list[str]) -> tuple[int, float]:
    basetemp = Path(tempfile.mkdtemp(prefix="roost-reliability-"))
    command = [
        sys.executable, "-m", "pytest", "tests/reliability", "-q", "-rxX", "-p", "no:cacheprovider",
        f"--basetemp={basetemp / 'bt'}", f"--reliability-results={results}",
    ]
    if soak:
        command.append("--soak")
    command += extra
    print("$", " ".join(command), flush=True)
    began = time.monotonic()
    status = subprocess.call(command, cwd=ROOT)
    return status, time.monotonic() - began


def outcome_text(row: dict[str, Any], tests: dict[str, Any]) -> str:
    outcome = row.get("outcome", "unknown")
    reason = tests.get(row.get("nodeid", ""), {}).get("reason") or ""
    if outcome == "xfailed":
        defect = reason.split(":", 1)[0].strip() if reason.startswith("D") else "known defect"
        return f"xfail ({defect}, fix proposed)"
    if outcome == "xpassed":
        return "XPASS (fixed: drop the marker)"
    return outcome


def cell(value: Any) -> str:
    text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def render(data: dict[str, Any]) -> str:
    tests = data.get("tests", {})
    rows = list(data.get("rows", []))
    recorded = {row["nodeid"] for row in rows}
    for nodeid, info in tests.items():
        if nodeid not in recorded:
            # A test that ended before it recorded anything still gets its row.
            section = next((name for key, name in NODE_SECTIONS if key in nodeid), "bad input")
            rows.append({"nodeid": nodeid, "section": section, "name": nodeid.split("::", 1)[-1], "runs": 1, "messages": 0, "cases": 0, "result": "(no counts: the test ended early)", "outcome": info["outcome"]})
    order = {name: index for index, name in enumerate(SECTIONS)}
    # By area, then in the order the suite ran them.
    rows = [row for _, row in sorted(enumerate(rows), key=lambda pair: (order.get(pair[1]["section"], 99), pair[0]))]
    lines = [
        "| Area | Case | Runs | Messages | Cases | Outcome | Detail |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for row in rows:
        lines.append(
            "| "
            + " | ".join(
                cell(v)
                for v in (
                    row["section"],
                    row["name"],
                    f"{row.get('runs', 0):,}",
                    f"{row.get('messages', 0):,}",
                    f"{row.get('cases', 0):,}",
                    outcome_text(row, tests),
                    row.get("result", ""),
                )
            )
            + " |"
        )
    counts: dict[str, int] = {}
    for info in tests.values():
        counts[info["outcome"]] = counts.get(info["outcome"], 0) + 1
    totals = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
    messages = sum(row.get("messages", 0) for row in rows)
    cases = sum(row.get("cases", 0) for row in rows)
    head = (
        f"Run {data.get('created', '?')} on {data.get('machine', '?')}"
        + (" — soak" if data.get("soak") else "")
        + f": {len(tests)} tests ({totals}); {messages:,} messages and {cases:,} cases checked"
        + (f"; {data['elapsed']:.0f} s" if data.get("elapsed") else "")
        + ". Produced by `.venv/bin/python -m tests.reliability.report"
        + (" --soak" if data.get("soak") else "")
        + "`."
    )
    return head + "\n\n" + "\n".join(lines) + "\n"


def write_doc(table: str) -> None:
    text = DOC.read_text() if DOC.exists() else f"# Reliability\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        text = text.rstrip("\n") + f"\n\n## Results\n\n{BEGIN}\n{END}\n"
    before, rest = text.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    DOC.write_text(before + BEGIN + "\n" + table + END + after)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--soak", action="store_true", help="run the long soak")
    parser.add_argument("--from", dest="source", type=Path, help="render this results file instead of running the suite")
    parser.add_argument("--no-write", action="store_true", help=f"print only; leave {DOC.relative_to(ROOT)} as it is")
    parser.add_argument("--keep", type=Path, help="keep the results JSON here")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    status = 0
    if args.source:
        data = json.loads(args.source.read_text())
    else:
        results = args.keep or Path(tempfile.mkdtemp(prefix="roost-reliability-")) / "results.json"
        status, elapsed = run_suite(results, args.soak, args.pytest_args)
        if not results.exists():
            print("report: the suite wrote no results", file=sys.stderr)
            return status or 1
        data = json.loads(results.read_text())
        data["elapsed"] = elapsed
        results.write_text(json.dumps(data, indent=1))
    table = render(data)
    print(table)
    if not args.no_write:
        write_doc(table)
        print(f"report: wrote {DOC.relative_to(ROOT)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
