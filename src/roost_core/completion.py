"""``roost completion bash|zsh``: a shell completion script made from the CLI's own
argparse parser, so it can never list a command or flag the CLI does not have.

The script completes commands, their flags, and the values of flags and arguments that
have a fixed set (``--host``, ``--state``, ``--group``, ``roost daemon ACTION``...),
folders for ``--cwd`` and files for ``--scenario`` and ``--session``, and job ids and
names where a command takes a job (``roost log ID``, ``roost view --select``): the script
asks ``roost _jobs`` (:func:`print_job_refs`), which asks a daemon that runs and prints
nothing when none does (a tab press never starts one, nor makes a home). A name is
matched as plain text and offered shell-quoted: a job's name never runs as shell code
in the user's shell. zsh runs the bash script through its ``bashcompinit``, as gh's and
many tools' do. Only the standard library.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterable, Mapping

SHELLS = ("bash", "zsh")

#: Shell function name (bash and zsh share it).
FUNCTION = "_roost_complete"
#: Flags (by ``dest``) whose value is a folder, or a file; any other flag's value is free
#: text (a name, a model, a number) and completes to nothing.
DIR_VALUES = frozenset({"cwd"})
FILE_VALUES = frozenset({"scenario", "session"})
#: Positionals and flags (by ``dest``) whose value is a job: an id or a name.
JOB_VALUES = frozenset({"id", "select"})
#: The hidden command the script runs for job ids and names (:func:`print_job_refs`).
JOBS_COMMAND = "_jobs"
#: The shell function that completes a job from what ``roost _jobs`` prints.
JOBS_FUNCTION = "_roost_complete_job"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The commands a user types (a hidden one, ``_jobs``, is the script's own)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {name: sub for name, sub in action.choices.items() if not name.startswith("_")}
    return {}


def _words(values: Iterable[str]) -> str:
    return shlex.quote(" ".join(values))


def _command_case(name: str, parser: argparse.ArgumentParser, values: Mapping[str, Iterable[str]]) -> list[str]:
    """The ``case`` branch for one command: its flags, the values of flags that take one,
    and its positionals' fixed values in order."""
    flags: list[str] = []
    value_lines: list[str] = []
    positionals: list[tuple[str, list[str]]] = []
    for action in parser._actions:
        if action.option_strings:
            flags.extend(action.option_strings)
            if action.nargs == 0:
                continue
            known = values.get(action.dest) or action.choices
            pattern = "|".join(action.option_strings)
            if known:
                value_lines.append(f"        {pattern}) COMPREPLY=($(compgen -W {_words(known)} -- \"$cur\")); return ;;")
            elif action.dest in JOB_VALUES:
                value_lines.append(f"        {pattern}) {JOBS_FUNCTION}; return ;;")
            elif action.dest in DIR_VALUES:
                value_lines.append(f'        {pattern}) COMPREPLY=($(compgen -d -- "$cur")); return ;;')
            elif action.dest in FILE_VALUES:
                value_lines.append(f'        {pattern}) COMPREPLY=($(compgen -f -- "$cur")); return ;;')
            else:
                value_lines.append(f"        {pattern}) COMPREPLY=(); return ;;")  # free text: a name, a number
        elif not isinstance(action, argparse._SubParsersAction):
            positionals.append((action.dest, list(action.choices or ())))
    lines = [f"    {shlex.quote(name)})", '      case "$prev" in', *value_lines, "      esac"]
    lines.append(f"      flags={_words(flags)}")
    for index, (dest, choices) in enumerate(positionals):
        if choices:
            lines.append(f"      [ \"$npos\" -eq {index} ] && words={_words(choices)}")
        elif dest in JOB_VALUES:
            lines.append(f'      [ "$npos" -eq {index} ] && [[ "$cur" != -* ]] && {{ {JOBS_FUNCTION}; return; }}')
    lines.append("      ;;")
    return lines


def bash_script(parser: argparse.ArgumentParser, values: Mapping[str, Iterable[str]] | None = None) -> str:
    """The bash completion script for ``parser`` (``roost``'s). ``values`` gives the
    fixed values of flags by their ``dest`` where argparse has no ``choices``."""
    values = values or {}
    commands = _subparsers(parser)
    top_flags = [flag for action in parser._actions for flag in action.option_strings]
    top_valued = [flag for action in parser._actions if action.option_strings and action.nargs != 0 for flag in action.option_strings]
    cases: list[str] = []
    for name, sub in commands.items():
        cases.extend(_command_case(name, sub, values))
    valued = "|".join(top_valued) or "--no-such-flag"
    return "\n".join(
        [
            "# roost shell completion (bash). Load it with:",
            '#   eval "$(roost completion bash)"',
            "# A job's id or name: from a daemon that runs (none is started), matched as plain",
            "# text (never through compgen -W, which would expand a name as shell code).",
            f"{JOBS_FUNCTION}() {{",
            "  local ref",
            "  COMPREPLY=()",
            "  while IFS= read -r ref; do",
            '    [[ "$ref" == "$cur"* ]] && COMPREPLY+=("$(printf %q "$ref")")',
            f'  done < <("${{COMP_WORDS[0]}}" {JOBS_COMMAND} 2>/dev/null)',
            "}",
            f"{FUNCTION}() {{",
            '  local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
            '  local cmd="" npos=0 i word flags words=""',
            "  # The command is the first word that is not a flag (or a top-level flag's value);",
            "  # npos counts the command's positional words before the one being completed.",
            "  for ((i = 1; i < COMP_CWORD; i++)); do",
            '    word="${COMP_WORDS[i]}"',
            '    if [ -z "$cmd" ]; then',
            '      case "$word" in',
            f"        {valued}) ((i++)) ;;",
            "        -*) ;;",
            '        *) cmd="$word" ;;',
            "      esac",
            '    elif [[ "$word" != -* ]]; then',
            '      case "${COMP_WORDS[i-1]}" in',
            "        --*) ;;",
            "        *) ((npos++)) ;;",
            "      esac",
            "    fi",
            "  done",
            '  case "$cmd" in',
            '    "")',
            '      case "$prev" in',
            f"        {valued}) return ;;",
            "      esac",
            f"      flags={_words(top_flags)}",
            f"      words={_words(commands)}",
            "      ;;",
            *cases,
            "  esac",
            '  if [[ "$cur" == -* ]]; then',
            '    COMPREPLY=($(compgen -W "$flags" -- "$cur"))',
            "  else",
            '    COMPREPLY=($(compgen -W "$words" -- "$cur"))',
            "  fi",
            "}",
            f"complete -F {FUNCTION} roost",
            "",
        ]
    )


def script(shell: str, parser: argparse.ArgumentParser, values: Mapping[str, Iterable[str]] | None = None) -> str:
    """The completion script for ``shell`` (one of :data:`SHELLS`)."""
    body = bash_script(parser, values)
    if shell == "zsh":
        header = "\n".join(
            [
                "# roost shell completion (zsh, through bashcompinit). Load it with:",
                '#   eval "$(roost completion zsh)"',
                "(( $+functions[compdef] )) || { autoload -U +X compinit && compinit; }",
                "autoload -U +X bashcompinit && bashcompinit",
                "",
            ]
        )
        return header + body
    return body


def print_job_refs() -> int:
    """``roost _jobs``: every job's id, then its name, one a line, from the daemon when
    one runs (none is started, no home is made); nothing when none does. A name the
    shell could not take back as typed (a line break, a control or bidi character) is
    left out: its id completes it. Always exit 0: a tab press shows no error."""
    from roost_core.client import DaemonUnavailable, connect
    from roost_core.names import shown
    from roost_core.paths import HomeError
    from roost_core.protocol import ProtocolError

    try:
        with connect(autostart=False) as conn:
            rows = conn.call("jobs")["jobs"]
    except (DaemonUnavailable, HomeError, OSError, ProtocolError):
        return 0
    refs = [row["id"] for row in rows]
    refs += [row["name"] for row in rows if row["name"] and shown(row["name"]) == row["name"]]
    print("\n".join(dict.fromkeys(refs)))
    return 0
