"""The ``roost`` command's entry point (``[project.scripts]``): a hook command an agent CLI
runs on every event of its loop (``roost claude hook PostToolUse`` after every tool call)
goes straight to its relay; every other command to :mod:`roost_core.cli`.

A hook's relay imports what relays one JSON object and no more (:mod:`roost_core.hookrelay`),
so the hooks' command lines stay ``roost NAME hook EVENT`` and cost about what a bare
Python start does; the CLI, which builds its parser from the plugins, would cost ten times
that on every tool call. Anything else on the command line (an option, another word, an
event the host does not have) goes to the CLI, which answers it as it always did.
"""

from __future__ import annotations

import sys

#: ``roost NAME hook EVENT`` of each bundled host that has hooks: the relay it runs
#: (``module:function``, called with the EVENT), its events, and whether it takes
#: ``--bridge PATH`` (a job's hooks name their bridge so). The same as each host's command
#: runs through the CLI (``tests/unit/test_fast_commands.py`` checks).
HOOK_RELAYS: dict[str, tuple[str, tuple[str, ...], bool]] = {
    "claude": ("roost_core.hookrelay:main", ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"), False),
    "codex": ("roost_core.hookrelay:main", ("UserPromptSubmit", "PostToolUse", "Stop"), False),
    "qwen": ("roost_core.hookrelay:main", ("UserPromptSubmit", "PostToolUse", "Stop"), False),
    "opencode": ("roost_core.hookrelay:main", ("PostToolUse",), False),
    "gemini": ("roost_plugins.gemini.hook:main", ("BeforeAgent", "AfterTool", "AfterAgent"), True),
}


def hook_relay(argv: list[str]) -> int | None:
    """Run ``argv`` when it is ``NAME hook EVENT`` (``--bridge PATH`` after it where the
    relay takes one) of :data:`HOOK_RELAYS`: the relay's exit status; None for any other
    command line."""
    if len(argv) < 3 or argv[1] != "hook" or argv[0] not in HOOK_RELAYS:
        return None
    target, events, takes_bridge = HOOK_RELAYS[argv[0]]
    event, rest = argv[2], argv[3:]
    if event not in events:
        return None
    options: dict[str, str] = {}
    if rest:
        if not (takes_bridge and len(rest) == 2 and rest[0] == "--bridge"):
            return None
        options["bridge"] = rest[1]
    module, _, function = target.partition(":")
    __import__(module)
    status: int = getattr(sys.modules[module], function)(event, **options)
    return status


def main(argv: list[str] | None = None) -> int:
    """``roost ...``: a hook's relay (:func:`hook_relay`), the version, else the CLI."""
    args = sys.argv[1:] if argv is None else argv
    status = hook_relay(args)
    if status is not None:
        return status
    if args in (["--version"], ["-V"]):
        # What the CLI's parser prints, without the plugins its parser lists.
        from roost_core import __version__

        print(f"roost {__version__}")
        return 0
    from roost_core.cli import main as cli_main

    return cli_main(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
