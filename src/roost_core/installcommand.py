"""The ``roost NAME install | uninstall | hook EVENT`` command each agent CLI's host shares
(``claude``, ``codex``, ``qwen``, ``opencode``): each host says what its actions do, this
parses and runs them the same way, with the same exit statuses and output.

It imports only the standard library at the top: a job's hooks run ``hook`` through it,
and a hook must start fast.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shlex
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

#: What ``install`` and ``uninstall`` return: a JSON object with at least ``changed``.
Result = dict[str, Any]


def add_arguments(parser: argparse.ArgumentParser, *, events: Sequence[str], action_help: str, event_help: str) -> None:
    """The command's arguments: the action, the hook's event, ``--json``."""
    parser.add_argument("action", choices=["install", "uninstall", "hook"], help=action_help)
    parser.add_argument("event", nargs="?", choices=events, help=event_help)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(
    args: argparse.Namespace,
    *,
    name: str,
    hook: str,
    actions: str,
    what: str,
    where: Callable[[Result], str],
    after_install: Callable[[Result], None] | None = None,
    program: str | None = None,
) -> int:
    """Run ``roost NAME ACTION``. ``hook`` calls the function ``hook`` names
    (``"package.module:function"``) with the EVENT; ``install`` and ``uninstall`` call the
    functions of that name in the module ``actions`` names and print ``WHAT installed in
    WHERE`` (or the result as JSON with ``--json``), then ``after_install(result)`` may add
    a note. The modules are imported only for their action, so a hook starts fast. Exit 0
    done, 1 a settings file roost cannot read or write (one ``roost: CODE: message``
    line), 2 a hook without an EVENT."""
    if args.action == "hook":
        if not args.event:
            print(f"roost: bad_args: roost {name} hook needs an EVENT", file=sys.stderr)
            return 2
        module, _, function = hook.partition(":")
        status: int = getattr(importlib.import_module(module), function)(args.event)
        return status
    return run_action(args, actions=actions, what=what, where=where, after_install=after_install, program=program)


def run_action(
    args: argparse.Namespace,
    *,
    actions: str,
    what: str,
    where: Callable[[Result], str],
    after_install: Callable[[Result], None] | None = None,
    program: str | None = None,
) -> int:
    """Run ``roost NAME install`` or ``uninstall`` (``args.action``), as :func:`run` says:
    the function of that name in the module ``actions`` names, its result printed; exit 0
    done, 1 a settings file roost cannot read or write. A command whose ``hook`` is not
    :func:`run`'s (``roost gemini``'s takes a ``--bridge``) runs its actions with this.
    ``program`` (``"package.module:function"``) finds the agent's program, raising with
    a sentence when it is not installed: install then says so in a warning line on
    stderr, and installs all the same (the settings take effect once it is)."""
    from roost_core.cli_support import classify, error_line
    from roost_core.settingsfile import SettingsFileError, SettingsWriteError

    try:
        result: Result = getattr(importlib.import_module(actions), args.action)()
    except (SettingsFileError, SettingsWriteError) as exc:
        print(error_line(*(classify(exc) or ("bad_config", str(exc)))), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=2))
    elif args.action == "install":
        print(f"{what} {'installed in' if result['changed'] else 'already in'} {where(result)}")
        if after_install is not None:
            after_install(result)
    else:
        print(f"{what} {'removed from' if result['changed'] else 'were not in'} {where(result)}")
    if args.action == "install" and program is not None:
        warn_if_missing(program)
    return 0


def warn_if_missing(program: str) -> None:
    """``roost: warning: ...`` on stderr when the function ``program`` names cannot find
    the agent's program (it raises with the sentence to say)."""
    module, _, function = program.partition(":")
    try:
        getattr(importlib.import_module(module), function)()
    except Exception as exc:  # noqa: BLE001 - each host's own error says what is missing
        print(f"roost: warning: {exc}; roost is in its settings all the same, for when it is", file=sys.stderr)


def main(name: str, add: Callable[[argparse.ArgumentParser], None], run: Callable[[argparse.Namespace], int], argv: list[str] | None = None) -> int:
    """``python -m PACKAGE ...``: ``roost NAME``'s command without the whole CLI (a job's
    hooks run this, so they start fast); ``argv`` defaults to this process's arguments."""
    parser = argparse.ArgumentParser(prog="roost")
    sub = parser.add_subparsers(dest="command", required=True)
    add(sub.add_parser(name))
    return run(parser.parse_args([name, *(sys.argv[1:] if argv is None else argv)]))


# ---------------------------------------------------------------------- what an install writes


def roost_command() -> list[str]:
    """How an agent should run roost: the ``roost`` script beside this Python, else the
    one on PATH, else ``python -m roost_core.launch`` (what the script runs)."""
    beside = Path(sys.executable).parent / "roost"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("roost")
    return [found] if found else [sys.executable, "-m", "roost_core.launch"]


def hook_command(name: str, event: str) -> str:
    """The shell command an agent's hook ``event`` runs: ``roost NAME hook EVENT``."""
    return shlex.join([*roost_command(), name, "hook", event])


def is_roost_hook(command: Any, name: str, *, events: Sequence[str] | None = None, runners: Sequence[str] = ("roost_core.cli",)) -> bool:
    """Whether a hook's ``command`` is roost's: ``... NAME hook EVENT`` (an EVENT of
    ``events``, when given) run by a roost, this install's or another's (a ``roost``
    script, or Python running ``roost_core.launch`` or a module of ``runners``)."""
    if not isinstance(command, str):
        return False
    try:
        parts = shlex.split(command)
    except ValueError:
        return False
    if len(parts) < 4 or parts[-3:-1] != [name, "hook"] or (events is not None and parts[-1] not in events):
        return False
    runner = parts[:-3]
    return Path(runner[0]).name == "roost" or any(module in runner for module in ("roost_core.launch", *runners))
