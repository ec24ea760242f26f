"""Agent hosts: what the core knows of them is what plugins register.

Every host is a :class:`~roost_core.records.HostSpec` a plugin contributes through
``roost_register_hosts``: roost's own (the default plugins of :mod:`roost_plugins.hosts`)
exactly as a team's. The core asks :func:`registered_hosts` and names none of them. Beside
this module: what hosts share (``base``, ``process``; ``bridged``, ``bridge`` and
``handover`` for those whose agent CLI reaches roost over a private socket; ``lazy`` names
a plugin's pieces without importing them) and the two hosts that need no agent CLI
(``scripted``, ``shell``); each agent CLI's host is a package of :mod:`roost_plugins`.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from typing import Any

from roost_core.records import HostSpec, TranscriptEntry

log = logging.getLogger("roost.hosts")


def registered_hosts(pm: Any) -> dict[str, HostSpec]:
    """Every host the plugins of ``pm`` register, by name, in the order the plugins were
    registered: roost's default plugins first, then installed ones. A name registered
    twice keeps its first registration (a default host keeps its name while its plugin
    runs; block that plugin to put another host under the name), and the second is
    logged; a contribution that is not a :class:`HostSpec` is logged and left out."""
    hosts: dict[str, HostSpec] = {}
    # pluggy calls the implementations last-registered first: reversed, their lists come
    # in registration order.
    for contributed in reversed(pm.hook.roost_register_hosts()):
        for spec in contributed or ():
            if not isinstance(spec, HostSpec):
                log.warning("roost_register_hosts: %r is not a HostSpec; left out", spec)
            elif spec.name in hosts:
                log.warning("host %r is registered twice: the first registration is kept", spec.name)
            else:
                hosts[spec.name] = spec
    return hosts


def transcript_reader(spec: HostSpec | None) -> Callable[[dict[str, Any]], list[TranscriptEntry]]:
    """How a line of a session file of ``spec``'s host reads (its ``transcript_entries``),
    roost's own format's reader for a host that has none or a host no plugin registers."""
    if spec is not None and spec.transcript_entries is not None:
        reader: Callable[[dict[str, Any]], list[TranscriptEntry]] = spec.transcript_entries
        return reader
    from roost_core.transcript import parse_entries

    return parse_entries


def program_missing(variable: str, program: str, what: str) -> str | None:
    """Why a host's program cannot be found where its workers will look (``$variable``,
    else ``program`` on this process's PATH, which the workers inherit); None when it is
    there. Checked when a job is made, so a missing agent is a refusal at once, not a
    worker that crashes until it is given up; looked up anew each time, so a program
    installed since into a folder on that PATH is found with no restart."""
    configured = os.environ.get(variable)
    if configured:
        return None if shutil.which(configured) else f"{what} is not installed: {variable}={configured!r} is not an executable"
    if shutil.which(program):
        return None
    return (
        f"{what} is not installed: no `{program}` on the daemon's PATH and no {variable}; install it or set {variable} "
        "(the daemon looks at each job start, on the PATH and environment it was started with)"
    )


def session_seqs(spec: HostSpec | None, path: str) -> set[int]:
    """The queue seqs the session file ``path`` of a job on ``spec``'s host holds, read as
    that host writes it (its ``transcript_seqs``, else roost's own format). Raises
    ``OSError`` or ``ValueError`` when the file cannot be read."""
    if spec is not None and spec.transcript_seqs is not None:
        return set(spec.transcript_seqs(path))
    from roost_core.transcript import read_entries, seqs_in

    return seqs_in(read_entries(path))


def session_lines(spec: HostSpec | None, path: str) -> list[dict[str, Any]]:
    """Every parsed line of the session ``path`` of a job on ``spec``'s host: its
    ``transcript_lines`` when it has one (a session kept in several files), else the JSON
    objects of the file itself."""
    if spec is not None and spec.transcript_lines is not None:
        return list(spec.transcript_lines(path))
    from roost_core.transcript import read_entries

    return read_entries(path)
