"""Telling a person that a background session waits on a dialog: the ``dialogs`` event to
the connected foreground sessions of the job's tree (a pi parent shows it in its footer).

A dialog opens and closes rarely; the event carries the whole list of the tree's waiting
jobs, so a receiver just shows what it last got.
"""

from __future__ import annotations

from typing import Any

from roost_core.daemon.jobs import Job
from roost_core.daemon.peers import ForegroundPeer


def foreground_tree(peer: ForegroundPeer) -> str:
    """The tree a foreground session roots, named as ``Job.tree`` names it."""
    return peer.session or f"peer:{peer.id}"


def waiting(jobs: dict[str, Job], tree: str) -> list[dict[str, Any]]:
    """The jobs of ``tree`` that wait on a dialog: id, name, question and options."""
    return [
        {"id": job.id, "name": job.name, "question": job.question, "options": job.dialog_options}
        for job in jobs.values()
        if job.dialog and job.tree == tree
    ]


def tell(jobs: dict[str, Job], foreground: dict[str, ForegroundPeer], tree: str) -> None:
    """Send the ``dialogs`` event to every connected foreground session rooting ``tree``."""
    event: dict[str, Any] | None = None
    for peer in foreground.values():
        if peer.conn is not None and foreground_tree(peer) == tree:
            event = event or {"event": "dialogs", "waiting": waiting(jobs, tree)}
            peer.conn.send(event)


def tell_joined(jobs: dict[str, Job], peer: ForegroundPeer) -> None:
    """A foreground session (re)registered: tell it of dialogs already waiting in its tree."""
    if peer.conn is None:
        return
    found = waiting(jobs, foreground_tree(peer))
    if found:
        peer.conn.send({"event": "dialogs", "waiting": found})
