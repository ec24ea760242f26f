"""The text the commands print (roost_core.cli_support), without a daemon. The commands
themselves run in tests/system/test_cli*.py."""

from __future__ import annotations

import pytest

from roost_core.cli_support import CommandError, check_states, cut, format_jobs, format_reply
from roost_core.plugins import make_plugin_manager, plugin_notes


@pytest.mark.parametrize(
    ("text", "width", "expected"),
    [
        ("short", 10, "short"),
        ("refactor the session store", 20, "refactor the…"),
        ("one,  two\nthree", 40, "one, two three"),  # one line, single spaces
        ("a-very-long-single-word-name", 10, "a-very-lo…"),  # no word boundary to keep
        ("words then averyveryverylongword", 20, "words then…"),
        ("ends with a comma, then more", 19, "ends with a comma…"),
    ],
)
def test_cut_ends_with_an_ellipsis_after_a_whole_word(text, width, expected):
    assert cut(text, width) == expected
    assert len(cut(text, width)) <= width


def row(**fields):
    base = {"id": "0123abcd", "name": "job", "state": "done", "live": True, "host": "scripted", "question": None, "error": None, "summary": None}
    return {**base, **fields}


def test_jobs_table_columns_line_up_under_a_header():
    text = format_jobs([row(summary="ok"), row(id="4567cdef", name="a much longer name", state="needs_input", question="Which?")], width=80)
    lines = text.splitlines()
    assert lines[0].split() == ["ID", "STATE", "LIVE", "HOST", "NAME", "DETAIL"]
    column = lines[0].index("DETAIL")
    assert lines[1][column:] == "ok" and lines[2][column:] == "Which?"
    # Finished jobs are not called live, whatever their worker does.
    assert lines[1].split()[2] == "-" and lines[2].split()[2] == "live"
    assert format_jobs([]) == "no jobs"


def test_jobs_detail_is_the_error_of_a_failed_job():
    (line,) = format_jobs([row(state="failed", error="worker crashed", summary="half done")], width=80).splitlines()[1:]
    assert line.endswith("  worker crashed")


@pytest.mark.parametrize(
    ("outcome", "says"),
    [("delivered", "delivered to its running worker"), ("queued", "queued; its worker takes it when it connects"), ("started", "a worker was started for it")],
)
def test_reply_line_says_what_the_number_is_and_what_happened(outcome, says):
    assert format_reply({"id": "0123abcd", "seq": 4, "result": outcome}) == f"0123abcd: reply is item 4 of the job's queue (its seq); {says}"


def test_check_states_names_the_states_there_are():
    assert check_states(["done", "failed"]) == ("done", "failed")
    with pytest.raises(CommandError) as caught:
        check_states(["done", "finished"])
    assert caught.value.code == "bad_args"
    assert caught.value.message == "'finished' is not a job state (one of: running, idle, needs_input, done, failed, stopped)"


def test_no_notes_for_the_default_set_of_plugins():
    assert plugin_notes(make_plugin_manager(autoload=False)) == []
    notes = plugin_notes(make_plugin_manager(disabled=("envelope",), autoload=False))
    assert notes == ["default plugin 'envelope' is blocked (by --disable-plugin or ROOST_DISABLE_PLUGINS): the core does the neutral thing for its hooks."]
