"""roost for the pi coding agent: the bundled pi extension and its install commands.

The extension (``roost-extension.ts``, package data) is a thin bridge: a foreground pi
joins as a peer through it, and a background pi job (``roost_plugins.pi.host``) talks to its
own worker through it. See ``docs/pi.md``.
"""

from __future__ import annotations

from pathlib import Path

EXTENSION_NAME = "roost-extension.ts"


def extension_path() -> Path:
    """The absolute path of the bundled pi extension."""
    return (Path(__file__).resolve().parent / EXTENSION_NAME).resolve()
