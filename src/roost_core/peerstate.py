"""What a peer is doing, told apart, and what a message to it will do: the ``activity`` and
``onMessage`` of the ``peers`` and ``agents`` rows (``roost_agents``, ``roost agents``).

A job's ``state`` says how its last run settled; it does not say whether a process is
there to read a message. ``idle`` covers a live idle child, a hibernated one and one whose
worker crashed, which a lead must tell apart (to wake it, not spawn a duplicate); and a
settled child that keeps processes of its own running (a dev server it started) is not
hibernated while they run. No I/O: the daemon's tables give the record's fields.
"""

from __future__ import annotations

from typing import Any

#: What a message does to a peer in each activity (the ``onMessage`` of a row).
ON_MESSAGE = {
    "running": "a message reaches it in this run",
    "dialog": "a message waits until the user answers its dialog",
    "idle": "a message starts a run",
    "background": "a message starts a run; its background processes keep running",
    "needs_input": "a message starts a run",
    "hibernated": "a message wakes it",
    "asleep": "a message wakes it",
    "crashed": "a message restarts it",
    "ended": "a message does not wake it (the user may restart it)",
    "no messages": "it takes no messages",
    "connected": "a message reaches it",
    "gone": "no message reaches it",
}


def job_activity(
    *, state: str, live: bool, dialog: bool, crashes: int, spawned: bool, accepts_messages: bool, background: int = 0
) -> str:
    """A job's activity: ``running``, ``dialog`` (waiting on a dialog), ``idle`` or
    ``needs_input`` (settled, its worker there: ``done`` and a live ``failed`` count as
    idle), ``background`` (settled, its worker there, waiting on ``background`` processes
    of its own that still run: not hibernated meanwhile), ``hibernated`` (a settled
    spawned child with no process), ``asleep`` (any other settled job with no process:
    reaped), ``crashed`` (its worker died; a message restarts it), ``ended`` (stopped by
    the user) or ``no messages`` (its host takes none)."""
    if not accepts_messages:
        return "no messages"
    if state == "stopped":
        return "ended"
    if dialog:
        return "dialog"
    if live:
        if state in ("running", "needs_input"):
            return state
        return "background" if background else "idle"
    if crashes or state in ("failed", "running"):
        # No worker, and the last one died (a crash while idle keeps the state it had).
        return "crashed"
    return "hibernated" if spawned else "asleep"


#: Activities the state beside them says already: the label is the state alone.
_SAID_BY_STATE = frozenset({"running", "idle", "needs_input", "ended", "no messages", "connected", "gone"})


def label(state: str, activity: str | None) -> str:
    """The state as the views and ``roost_agents`` show it: the job state, then the
    activity when it says more (``done, hibernated``; ``failed, crashed``;
    ``needs_input, dialog``)."""
    if activity is None or activity == state or activity in _SAID_BY_STATE:
        return state
    return f"{state}, {activity}"


def column_label(state: str, activity: str | None, width: int) -> str:
    """:func:`label` for a column ``width`` characters wide: the whole label when it fits,
    else the activity alone, which says more than the state (``hibernated``, not ``done``):
    a column must not say less than the row's detail line and ``--once`` do."""
    whole = label(state, activity)
    return whole if len(whole) <= width or activity is None else activity


def progress_text(row: dict[str, Any], now: float) -> str:
    """A running job's last sign of work (``progress``) in a few words (``working: 12 steps,
    last a tool boundary 3s ago``), or "" when it is not running or has none."""
    progress = row.get("progress")
    if row.get("state") != "running" or not isinstance(progress, dict):
        return ""
    ago = max(0, int(now - float(progress.get("at") or now)))
    steps = progress.get("steps") or 0
    return f"working: {steps} step{'s' if steps != 1 else ''}, last {progress.get('what')} {ago}s ago"


def background_text(row: dict[str, Any]) -> str:
    """A row's background processes in a few words (``2 background processes: sleep 300;
    npm run dev``), or "" when it has none: what ``roost jobs`` and ``roost agents`` add."""
    count = row.get("background") or 0
    if not count:
        return ""
    commands = "; ".join(str(entry.get("command") or "?") for entry in row.get("backgroundShown") or ())
    noun = "process" if count == 1 else "processes"
    return f"{count} background {noun}" + (f": {commands}" if commands else "")


def foreground_activity(live: bool) -> str:
    """A foreground session's activity: ``connected`` or ``gone`` (a message to it is dropped)."""
    return "connected" if live else "gone"
