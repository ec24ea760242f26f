"""Dialogs a background session opens (a pi extension's confirm/select/input, a Claude
Code permission prompt): how they are shown to a person and how an answer is read.

A dialog is a question and, for a choice, its options. Only the user answers one
(``roost answer``, ``roost reply``, the view); an agent's message never does. No I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

#: The options of a yes/no dialog (pi's ``confirm``).
CONFIRM_OPTIONS = ("yes", "no")
#: The options of a Claude Code permission prompt (roost's permission tool).
PERMISSION_OPTIONS = ("allow", "deny")
#: The most options a dialog shows (pi's ``select`` may list more: the rest are cut).
MAX_OPTIONS = 50
#: The longest option kept, in characters.
MAX_OPTION_CHARS = 200


def choice_of(text: str, options: Sequence[str]) -> str | None:
    """The option ``text`` names: the option itself (case and surrounding blanks
    ignored), or its number in the list (1 for the first); None when it names none."""
    wanted = text.strip().casefold()
    for option in options:
        if option.strip().casefold() == wanted:
            return option
    if wanted.isdigit() and 1 <= int(wanted) <= len(options):
        return options[int(wanted) - 1]
    return None


def options_text(options: Sequence[str]) -> str:
    """The options on one line, numbered: ``1) yes  2) no``."""
    return "  ".join(f"{number}) {option}" for number, option in enumerate(options, 1))


def dialog_line(
    question: str | None, options: Sequence[str] | None, question_chars: int = 160
) -> str:
    """A dialog on one line, for tables: its question (cut to ``question_chars``), then
    its options in brackets, never cut (they say what to answer)."""
    text = " ".join((question or "").split())
    if len(text) > question_chars:
        text = text[: question_chars - 1].rstrip() + "…"
    if options:
        text += f" [{' / '.join(options)}]"
    return text


def clean_options(options: Sequence[object]) -> list[str]:
    """Options as a dialog keeps them: strings, one line each, at most
    :data:`MAX_OPTIONS` of at most :data:`MAX_OPTION_CHARS` characters."""
    return [
        " ".join(str(option).split())[:MAX_OPTION_CHARS] for option in list(options)[:MAX_OPTIONS]
    ]
