"""roost_core.names: what makes a name unusable, how a terminal draws one, and the shell
word ``roost start`` prints for it (checked with a real bash)."""

from __future__ import annotations

import subprocess

import pytest

from roost_core.names import check_name, derived_name, json_text, shell_word, shown
from roost_core.protocol import ProtocolError

NAMES = ["fixer", "two words", "\u200ffix", "🚀 launch", "a\tb", "it's", "back\\slash", "\u202eevil\u200f", "esc\x1b[2J", "名前"]


@pytest.mark.parametrize("name", NAMES)
def test_a_usable_name_is_kept_as_it_is(name):
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", "   ", "\t", "\u200b\u200c\u200d", "\u200f ", "a\nb", "a\rb", "a\u2028b", "a\x85b", "a\x00b", "x" * 201])
def test_an_unusable_name_is_bad_args(name):
    with pytest.raises(ProtocolError) as refused:
        check_name(name)
    assert refused.value.code == "bad_args"


def test_a_derived_name_is_one_line():
    assert derived_name("fix\nthe\u2028bug") == "fix the bug"
    assert derived_name(" \n ") == "job"


def test_shown_escapes_what_would_move_the_cursor_or_reorder_the_line():
    assert shown("fixer") == "fixer" and shown("🚀 launch") == "🚀 launch" and shown("名前") == "名前"
    assert shown("a\tb") == "a\\tb"
    assert shown("\u202eevil\u200f") == "\\u202eevil\\u200f"
    assert shown("esc\x1b[2J") == "esc\\x1b[2J"
    assert shown("line\nbreak\u2028") == "line\\nbreak\\u2028"
    assert shown("keep\n\tthese\x07", keep="\n\t") == "keep\n\tthese\\x07"


@pytest.mark.parametrize("name", NAMES)
def test_the_shell_word_names_the_job_when_pasted_into_bash(name):
    word = shell_word(name)
    assert shown(word) == word  # nothing raw on the terminal
    echoed = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, check=True).stdout.decode()
    assert echoed == name


def test_json_text_parses_back_and_holds_nothing_raw():
    import json

    data = {"name": "\u202eevil\u200f 🚀 \U000e0001\x1b\x85\u2028", "rows": [1, "a\nb", "名前"]}
    text = json_text(data)
    assert json.loads(text) == data
    assert "🚀" in text and "名前" in text  # other non-ASCII stays as it is
    assert not any(shown(ch) != ch for ch in text if ch != "\n")
    assert json_text({"a": "x"}) == json.dumps({"a": "x"}, indent=2)
