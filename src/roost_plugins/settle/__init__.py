"""Default settle classification: a run whose final text ends by asking something needs
input, and the question is what it asks.

The rule, exactly. A run the host settled ``done`` or ``idle`` is ``needs_input`` when its
final assistant text *ends with a question*: reading the text's lines from the end,
blank lines and list items (``- x``, ``* x``, ``1. x``, ``a) x``: the options a question
offers) are passed over, and the first other line ends with ``?`` (or ``？``), once
closing emphasis, quotes and brackets (``*_`"')]``) are taken off. A list item that itself
ends with ``?`` counts too (a list of questions). The question is the paragraph holding
that line, with everything after it (its options). Anything else keeps the host's state:
a closing summary, a text that ends in a code block, an inline question followed by an
answer. ``needs_input`` and ``failed`` from the host stand as they are: the host knows
(the scripted host's ``ask``, a failed model call).

A courtesy question at the end ("Want me to add tests too?") counts: the run did end
asking, and the parent is the one to decide whether it needs an answer. A team that wants
a stricter rule installs a plugin of its own for this hook; it wins over this default.
"""

from __future__ import annotations

import re

from roost_core import hookimpl
from roost_core.records import RunRecord, Settlement

#: A list item: a bullet or an enumerator, then text.
LIST_ITEM = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)]|[A-Za-z][.)])\s+\S")
#: Closing characters that may follow a question mark (markdown emphasis, quotes, brackets).
CLOSERS = " \t*_`\"'’”»)]"
QUESTION_MARKS = ("?", "？")


def ends_with_question(line: str) -> bool:
    return line.rstrip().rstrip(CLOSERS).endswith(QUESTION_MARKS)


def asked_question(text: str) -> str | None:
    """The question ``text`` ends with (its paragraph and the options after it), or None."""
    lines = text.splitlines()
    end = len(lines)
    while end:
        line = lines[end - 1]
        if line.strip() and ends_with_question(line):
            break
        if line.strip() and not LIST_ITEM.match(line):
            return None
        end -= 1
    if not end:
        return None
    start = end - 1
    while start and lines[start - 1].strip():
        start -= 1
    return "\n".join(lines[start:]).strip()


@hookimpl(trylast=True)
def roost_classify_settle(run: RunRecord, host: str) -> Settlement | None:
    """``needs_input`` when a done or idle run's final text ends with a question."""
    if run.state not in ("done", "idle"):
        return Settlement(run.state, run.question, run.error, f"the host settled it {run.state}")
    question = asked_question(run.result)
    if question is None:
        return Settlement(run.state, None, run.error, "the final text asks nothing")
    return Settlement("needs_input", question, run.error, "the final text ends with a question")
