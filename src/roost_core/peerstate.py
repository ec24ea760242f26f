"""What a peer is doing, told apart, and what a message to it will do: the ``activity`` and
``onMessage`` of the ``peers`` and ``agents`` rows (``roost_agents``, ``roost agents``).

A job's ``state`` says how its last run settled; it does not say whether a process is
there to read a message. ``idle`` covers a live idle child, a hibernated one and one whose
worker crashed, which a lead must tell apart (to wake it, not spawn a duplicate). No I/O:
the daemon's tables give the record's fields.
"""

from __future__ import annotations

#: What a message does to a peer in each activity (the ``onMessage`` of a row).
ON_MESSAGE = {
    "running": "a message reaches it in this run",
    "dialog": "a message waits until the user answers its dialog",
    "idle": "a message starts a run",
    "needs_input": "a message starts a run",
    "hibernated": "a message wakes it",
    "asleep": "a message wakes it",
    "crashed": "a message restarts it",
    "ended": "a message does not wake it (the user may restart it)",
    "no messages": "it takes no messages",
    "connected": "a message reaches it",
    "gone": "no message reaches it",
}


def job_activity(*, state: str, live: bool, dialog: bool, crashes: int, spawned: bool, accepts_messages: bool) -> str:
    """A job's activity: ``running``, ``dialog`` (waiting on a dialog), ``idle`` or
    ``needs_input`` (settled, its worker there: ``done`` and a live ``failed`` count as
    idle), ``hibernated`` (a settled spawned child with no process), ``asleep`` (any
    other settled job with no process: reaped), ``crashed`` (its worker died; a message
    restarts it), ``ended`` (stopped by the user) or ``no messages`` (its host takes none)."""
    if not accepts_messages:
        return "no messages"
    if state == "stopped":
        return "ended"
    if dialog:
        return "dialog"
    if live:
        if state in ("running", "needs_input"):
            return state
        return "idle"
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


def foreground_activity(live: bool) -> str:
    """A foreground session's activity: ``connected`` or ``gone`` (a message to it is dropped)."""
    return "connected" if live else "gone"
