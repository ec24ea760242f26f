"""How a dialog's answer is read and how a dialog is drawn on one line (roost_core.dialogs),
and the permission tool's result for each answer (roost_plugins.claude.permission)."""

from __future__ import annotations

from roost_core.dialogs import choice_of, clean_options, dialog_line, options_text
from roost_plugins.claude import permission


def test_an_answer_names_an_option_as_listed_or_by_its_number():
    options = ["Blue", "green", "3"]
    assert choice_of(" blue ", options) == "Blue"  # case and blanks ignored; as listed
    assert choice_of("GREEN", options) == "green"
    assert choice_of("2", options) == "green"  # its number
    assert choice_of("3", options) == "3"  # an option that is a number wins over the number
    assert choice_of("4", options) is None and choice_of("0", options) is None
    assert choice_of("bl", options) is None  # no prefixes: an answer names one option exactly
    assert choice_of("", options) is None


def test_a_dialog_on_one_line_keeps_its_options_whole():
    line = dialog_line("Deploy\nto   prod? " + "x" * 300, ["yes", "no"])
    assert line.startswith("Deploy to prod? x") and line.endswith("… [yes / no]")
    assert len(line) == 160 + len(" [yes / no]")
    assert dialog_line("Name?", None) == "Name?"
    assert options_text(["yes", "no"]) == "1) yes  2) no"


def test_options_are_kept_on_one_line_and_bounded():
    options = clean_options(["a\nb", "x" * 500, *range(100)])
    assert options[0] == "a b" and len(options[1]) == 200 and len(options) == 50 and options[2] == "0"


def test_the_permission_result_allows_only_on_allow():
    tool_input = {"command": "rm -rf build"}
    assert permission.decision("allow", tool_input) == {"behavior": "allow", "updatedInput": tool_input}
    assert permission.decision("1", tool_input)["behavior"] == "allow"
    for answer in ("deny", "2", "yes", "whatever"):
        assert permission.decision(answer, tool_input) == {"behavior": "deny", "message": permission.DENIED}
    assert permission.question("Bash", tool_input) == "Claude Code asks to use Bash: rm -rf build"
    assert permission.question("Write", {"file_path": "/a", "content": "x"}) == "Claude Code asks to use Write: /a"
    assert permission.question("Odd", {"n": 1}) == 'Claude Code asks to use Odd: {"n": 1}'
