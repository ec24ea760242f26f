"""What the CLI says of a job's own workspace (``roost start --worktree``, ``roost rm``)."""

from __future__ import annotations

from typing import Any


def started_lines(workspace: dict[str, Any] | None) -> list[str]:
    """Where a job started with ``--worktree`` works, and what to know of it."""
    if not workspace:
        return []
    lines = [f"  worktree:    {workspace['path']} on branch {workspace['branch']} (from {str(workspace['base'])[:12]})"]
    lines.extend(f"  note: {note}" for note in workspace.get("notes") or ())
    return lines


def removed_lines(workspace: dict[str, Any] | None) -> list[str]:
    """What ``roost rm`` did with the job's workspace."""
    if not workspace:
        return []
    if workspace.get("removed"):
        what = f"  worktree {workspace['path']}: removed"
    else:
        what = f"  worktree {workspace['path']}: kept"
    if workspace.get("branchDeleted"):
        what += f"; branch {workspace['branch']} deleted (it was at {str(workspace.get('tip'))[:12]}: git branch {workspace['branch']} {workspace.get('tip')} brings it back)"
    else:
        what += f"; branch {workspace['branch']} kept"
    lines = [what]
    if workspace.get("kept"):
        lines.append(f"  kept because: {workspace['kept']}")
    return lines
