"""The agent tree as text: children under their parent with ``↳`` when grouped by
directory; ``↳ parent-name`` in the meta column when grouped by state. Shared by
``roost agents`` and the live view."""

from __future__ import annotations

from typing import Any

from roost_core.dialogs import dialog_line
from roost_core.names import shown_rows
from roost_core.peerstate import background_text, label

STATE_ORDER = ("running", "needs_input", "idle", "done", "failed", "stopped", "connected", "not running")


def usage_text(usage: dict[str, Any] | None) -> str:
    """``1,234 tokens`` (and ``cost 0.0123`` when the host reported one); "" for none."""
    if not usage or not (usage.get("tokens") or usage.get("cost")):
        return ""
    text = f"{int(usage.get('tokens') or 0):,} tokens"
    if usage.get("cost"):
        text += f", cost {float(usage['cost']):.4g}"
    return text


def failure_text(row: dict[str, Any]) -> str:
    """Why a failed job failed (``failed: ...``), or that a stopped one had failed first,
    as ``roost jobs`` says it; "" for any other row."""
    if row.get("state") == "failed":
        return f"failed: {row.get('error') or 'no error given'}"
    if row.get("state") == "stopped" and row.get("stoppedFrom") == "failed":
        return f"failed, then stopped: {row.get('error') or 'no error given'}"
    return ""


def tree_text(row: dict[str, Any]) -> str:
    """What the row's whole tree has spent, and whether its budget is (for a root row)."""
    tree = row.get("treeUsage") or {}
    text = usage_text(tree)
    if tree.get("spent"):
        text = f"{text or 'tree'} — budget spent"
    return f"tree: {text}" if text else ""


def _line(row: dict[str, Any], indent: str, meta: str = "", root: bool = False) -> str:
    detail: str | None
    if row.get("dialog"):
        # A dialog waits for a person: its text and options, and the command that answers it.
        detail = f"waits for you: {dialog_line(row.get('question'), row.get('dialogOptions'))} (roost answer {row['id']})"
    else:
        detail = row.get("question") if row.get("state") == "needs_input" else failure_text(row) or row.get("summary") or ""
    detail = " ".join((detail or "").split())  # one line: a question may span several
    live = "●" if row.get("live") else "○"
    host = f" [{row['host']}]" if row.get("host") else ""
    text = f"{indent}{live} {row['name'][:28]} ({row['id']}){host}  {label(row['state'], row.get('activity'))}"
    if meta:
        text += f"  {meta}"
    if row.get("attached"):
        text += f"  [attached: roost attach pid {row['attached']['pid']}]"
    spent = usage_text(row.get("usage"))
    if spent:
        text += f"  [{spent}]"
    if root and tree_text(row):
        text += f"  [{tree_text(row)}]"
    if background_text(row):
        text += f"  [{background_text(row)[:80]}]"
    if detail:
        text += f"  — {detail if row.get('dialog') else detail[:60]}"
    return text


def tree_order(rows: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """Rows in tree order with their depth: each parent followed by its children."""
    by_id = {row["id"]: row for row in rows}
    children: dict[str, list[dict[str, Any]]] = {}
    roots = []
    for row in rows:
        parent = row.get("parent")
        if parent is not None and parent in by_id and parent != row["id"]:
            children.setdefault(parent, []).append(row)
        else:
            roots.append(row)
    ordered: list[tuple[int, dict[str, Any]]] = []
    seen: set[str] = set()

    def visit(row: dict[str, Any], depth: int) -> None:
        if row["id"] in seen:
            return
        seen.add(row["id"])
        ordered.append((depth, row))
        for child in children.get(row["id"], []):
            visit(child, depth + 1)

    for root in roots:
        visit(root, 0)
    return ordered


def render_by_dir(rows: list[dict[str, Any]]) -> str:
    rows = shown_rows(rows)
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row.get("cwd") or "?", []).append(row)
    out = []
    for cwd in sorted(groups):
        out.append(cwd)
        group_ids = {row["id"] for row in groups[cwd]}
        for depth, row in tree_order(groups[cwd]):
            if depth == 0 and row.get("parent") and row["parent"] not in group_ids:
                out.append(_line(row, "  ", f"↳ {row.get('parentName') or row['parent']}"))
            else:
                out.append(_line(row, "  " + "   " * max(depth - 1, 0) + ("↳ " if depth else ""), root=depth == 0 and not row.get("parent")))
    return "\n".join(out) if out else "no agents"


def render_by_state(rows: list[dict[str, Any]]) -> str:
    rows = shown_rows(rows)
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row.get("state") or "?", []).append(row)
    out = []
    for state in sorted(groups, key=lambda s: STATE_ORDER.index(s) if s in STATE_ORDER else len(STATE_ORDER)):
        out.append(state)
        for row in groups[state]:
            meta = f"↳ {row.get('parentName') or row['parent']}" if row.get("parent") else ""
            out.append(_line(row, "  ", meta, root=not row.get("parent")))
    return "\n".join(out) if out else "no agents"
