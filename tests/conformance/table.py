"""The hosts × scenarios table of docs/hosts.md, made from a run of the conformance suite.

    pytest tests/conformance --junitxml=conformance.xml
    python tests/conformance/table.py conformance.xml [docs/hosts.md]

Prints the table (with a file argument, puts it between the file's two
``<!-- conformance table -->`` marks instead): ✓ passed, ✗ failed (its assertion's first
line in the notes below the table), — skipped (its reason: a program not installed).
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

MARK = "<!-- conformance table -->"
_NAME = re.compile(r"^(test_([a-z])_\w+)\[(\w+)\]$")


def results(xml_path: str) -> dict[tuple[str, str], tuple[str, str]]:
    """(scenario letter, host) -> (outcome mark, note) for every scenario case in the report."""
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        match = _NAME.match(case.get("name", ""))
        if not match:
            continue
        _, letter, host = match.groups()
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        if failure is not None:
            text = failure.get("message") or failure.text or ""
            out[letter, host] = ("✗", first_line(text))
        elif skipped is not None:
            out[letter, host] = ("—", first_line(skipped.get("message") or ""))
        else:
            out[letter, host] = ("✓", "")
    return out


def first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:240].replace("|", "\\|")


def table(found: dict[tuple[str, str], tuple[str, str]]) -> str:
    from roost_core.conformance import SCENARIOS

    titles = {name.split("_")[1]: name.split("_", 2)[2].replace("_", " ") for name in SCENARIOS}
    hosts = sorted({host for _, host in found})
    lines = ["| scenario | " + " | ".join(hosts) + " |", "|---|" + "---|" * len(hosts)]
    notes = []
    for letter, title in sorted(titles.items()):
        cells = []
        for host in hosts:
            mark, note = found.get((letter, host), ("?", "not run"))
            cells.append(mark)
            if note:
                notes.append(f"- {letter} × {host}: {note}")
        lines.append(f"| {letter}. {title} | " + " | ".join(cells) + " |")
    return "\n".join(lines + (["", *notes] if notes else [])) + "\n"


def main(argv: list[str]) -> int:
    text = table(results(argv[1]))
    if len(argv) < 3:
        print(text, end="")
        return 0
    path = Path(argv[2])
    head, _, rest = path.read_text().partition(MARK)
    _, _, tail = rest.partition(MARK)
    path.write_text(f"{head}{MARK}\n{text}{MARK}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
