"""The default settle classification, on its own manager: a run whose final text ends by
asking something needs input, with that question; the host's own failed / needs_input
stand; a team plugin wins; with no plugin the core keeps the host's state."""

from __future__ import annotations

import pytest

from roost_core import hookimpl, policy
from roost_core.records import Settlement
from roost_core.testing import make_cause, make_run
from roost_plugins import settle


@pytest.fixture
def pm(roost_plugin_manager):
    return roost_plugin_manager(settle)


def classify(pm, text, state="done", host="pi", **fields):
    return pm.hook.roost_classify_settle(run=make_run(state=state, result=text, **fields), host=host)


def test_a_final_paragraph_that_asks_is_the_question(pm):
    text = "I read both configs.\nThe staging one sets a 30s timeout.\n\nShould I use staging's timeout\nor keep production's 10s?"
    answer = classify(pm, text)
    assert answer.state == "needs_input"
    assert answer.question == "Should I use staging's timeout\nor keep production's 10s?"


@pytest.mark.parametrize(
    ("text", "question"),
    [
        ("Which branch should I merge into?", "Which branch should I merge into?"),
        ("Done with step 1.\n\n**Shall I go on with step 2?**  \n", "**Shall I go on with step 2?**"),
        ("Two ways:\n\nWhich do you prefer?\n\n1. rebase\n2. merge", "Which do you prefer?\n\n1. rebase\n2. merge"),
        ("Which do you prefer?\n- rebase\n- merge", "Which do you prefer?\n- rebase\n- merge"),
        ("Open points:\n- does the cache survive a restart?\n- is X thread-safe?", "Open points:\n- does the cache survive a restart?\n- is X thread-safe?"),
        ("Fertig. Soll ich die Tests auch anpassen？", "Fertig. Soll ich die Tests auch anpassen？"),
        ('I named it "fetch_all" (is that ok?)', 'I named it "fetch_all" (is that ok?)'),
    ],
    ids=["one line", "emphasis", "options after a blank line", "options", "a list of questions", "fullwidth", "in brackets"],
)
def test_what_counts_as_asking(pm, text, question):
    answer = classify(pm, text)
    assert (answer.state, answer.question) == ("needs_input", question)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "All tests pass. I fixed the off-by-one in parse().",
        "Why did it fail? The buffer was never flushed; fixed.",
        "Why did it fail?\nThe buffer was never flushed.",
        "Here is the change:\n\n```python\nx = a if ok else b  # why?\n```",
        "Done:\n\n- fixed the parser\n- added a test",
        "Should I? I did it anyway.\n\nAll green now.",
    ],
    ids=["empty", "a summary", "inline question answered", "question then answer", "ends in code", "a list of what was done", "an earlier paragraph asks"],
)
def test_what_does_not(pm, text):
    answer = classify(pm, text)
    assert (answer.state, answer.question) == ("done", None)


def test_a_run_only_agent_items_started_can_ask_too(pm):
    run = make_run(make_cause(1, "message", sender="f1234567"), state="idle", result="Which test file do you mean?")
    answer = pm.hook.roost_classify_settle(run=run, host="pi")
    assert (answer.state, answer.question) == ("needs_input", "Which test file do you mean?")
    assert classify(pm, "Looked at it; nothing to do.", state="idle").state == "idle"


def test_the_hosts_own_needs_input_and_failed_stand(pm):
    # The scripted host's ``ask``: its question is kept even when the text does not end with "?".
    asked = classify(pm, "Pick a branch.", state="needs_input", question="Pick a branch.")
    assert (asked.state, asked.question) == ("needs_input", "Pick a branch.")
    failed = classify(pm, "Shall I retry?", state="failed", error="model call failed")
    assert (failed.state, failed.question, failed.error) == ("failed", None, "model call failed")


class Strict:
    """A team rule: only a line starting with ``QUESTION:`` asks."""

    @hookimpl
    def roost_classify_settle(self, run, host):
        for line in reversed(run.result.splitlines()):
            if line.startswith("QUESTION:"):
                return Settlement("needs_input", line.removeprefix("QUESTION:").strip(), reason="team rule")
        return Settlement(run.state, reason="team rule")


def test_a_team_plugin_wins_over_the_default(roost_plugin_manager):
    pm = roost_plugin_manager(Strict(), defaults=True)
    courtesy = pm.hook.roost_classify_settle(run=make_run(result="Done. Want me to add more tests?"), host="pi")
    assert (courtesy.state, courtesy.reason) == ("done", "team rule")
    asked = pm.hook.roost_classify_settle(run=make_run(result="Stuck.\nQUESTION: which database?"), host="pi")
    assert (asked.state, asked.question) == ("needs_input", "which database?")


def test_with_no_settle_plugin_the_core_keeps_the_hosts_state(roost_plugin_manager):
    pm = roost_plugin_manager()
    run = make_run(result="Which branch?")
    assert policy.classify_settle(pm, run, "pi") == Settlement("done", None, None, "the host's own state")
    scripted = make_run(state="needs_input", result="Which branch?", question="Which branch?")
    assert policy.classify_settle(pm, scripted, "scripted").state == "needs_input"


def test_an_answer_that_is_not_a_settled_state_is_ignored(roost_plugin_manager):
    class Bogus:
        @hookimpl
        def roost_classify_settle(self, run, host):
            return Settlement("running")

    pm = roost_plugin_manager(Bogus(), settle)
    assert policy.classify_settle(pm, make_run(result="All done."), "pi").state == "done"
