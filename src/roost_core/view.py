"""``roost view``: a live terminal view of the agent tree.

The rows come from the daemon's ``watch`` op (a snapshot, then an ``agents`` event on every
change), so the screen follows the daemon without polling. Keys are read raw (cbreak mode)
in a thread; the terminal is given back as it was on quit, on an exception and on SIGTERM.
When stdout is not a terminal (or with ``--once``) the tree is printed once as text: the
lines of ``roost agents`` with the relation, queued and last-message columns added.

Only the standard library is imported at module level (``roost --help`` stays instant);
rich, anyio and the client are imported when the view runs.
"""

from __future__ import annotations

import argparse
import codecs
import os
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from roost_core.dialogs import dialog_line, options_text
from roost_core.names import shown, shown_rows
from roost_core.peerstate import background_text, column_label, label, progress_text
from roost_core.treeview import failure_text

GROUPS = ("dir", "state")
#: Width of the fixed columns right of the name: relation, state, queued, last message.
RIGHT_COLUMNS = 37
#: Bounds of the name column; what is left of a line shows question, status or summary.
LEFT_MIN = 20
LEFT_MAX = 48
DETAIL_MIN = 8
DETAIL_LINES = 4
STATE_STYLES = {
    "running": "yellow",
    "needs_input": "bold magenta",
    "idle": "cyan",
    "done": "green",
    "failed": "bold red",
    "stopped": "dim",
    "connected": "cyan",
    "not running": "dim",
}
TREE_HELP = "↑↓/jk select  ⏎/l log  r reply  a answer  s stop  t attach  g group  q quit"
LOG_HELP = "↑↓/jk scroll  PgUp/PgDn  g/G top/end  r reply  Esc/q back"


# ---------------------------------------------------------------------------- arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--group", choices=GROUPS, default="dir", help="group by directory (default) or by state; `g` toggles")
    parser.add_argument("--once", action="store_true", help="print the tree once as text and exit (the default when stdout is not a terminal)")
    parser.add_argument("--select", metavar="ID|NAME", help="the peer selected at the start; relations are seen from it (with --once, the relation column is shown only then)")


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> argparse.ArgumentParser:
    """Add the ``view`` command to ``roost``'s subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser("view", help="a live view of the agent tree (plain text when not a terminal)")
    add_arguments(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run ``roost view``: live on a terminal, the tree once as text otherwise."""
    interactive = sys.stdout.isatty() and sys.stdin.isatty()
    if args.once or not interactive:
        return print_once(args)
    return run_live(args)


# ---------------------------------------------------------------------------- the model (no I/O)


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` safe to put on a terminal: an agent's words must not move the cursor,
    change colours or reorder the line, so control, bidi and other invisible format
    characters (ESC among them) become visible escapes (:func:`names.shown`)."""
    text = text.replace("\t", "    ")
    if not keep_newlines:
        text = text.replace("\r\n", " ").replace("\n", " ")
    return shown(text, keep="\n" if keep_newlines else "")


def clean_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with every text field drawn safely (:func:`names.shown_rows`): a name keeps
    a tab or a bidi mark visible as an escape. Lookups take the rows before this."""
    return shown_rows(rows)


def tree_key(row: dict[str, Any]) -> str:
    """The key all sessions of one tree share (as the reach plugin computes it)."""
    if row.get("rootSession"):
        return str(row["rootSession"])
    if row.get("parent") and not row.get("parentSession"):
        return f"peer:{row['parent']}"
    if row.get("session"):
        return str(row["session"])
    return f"peer:{row['id']}"


def relation(seen_from: dict[str, Any] | None, row: dict[str, Any]) -> str:
    """``row`` as ``seen_from`` sees it: self/parent/child/sibling/tree/external.

    The same rules as ``roost_plugins.reach.relation_between``, on agent rows (where
    ``parent`` is the id holding the parent session). A view shows the tree, not a policy
    decision, so it does not go through the reach hook."""
    if seen_from is None:
        return ""
    if row["id"] == seen_from["id"]:
        return "self"
    me_session, me_parent_session, me_parent = seen_from.get("session"), seen_from.get("parentSession"), seen_from.get("parent")
    if (row.get("parentSession") and row["parentSession"] == me_session) or (row.get("parent") and row["parent"] == seen_from["id"]):
        return "child"
    if (me_parent_session and me_parent_session == row.get("session")) or (me_parent and me_parent == row["id"]):
        return "parent"
    if (me_parent_session and me_parent_session == row.get("parentSession")) or (me_parent and me_parent == row.get("parent")):
        return "sibling"
    if tree_key(seen_from) == tree_key(row):
        return "tree"
    return "external"


def last_message(epoch: float | None, now: float | None = None) -> str:
    """``HH:MM:SS`` today, ``Mon DD`` before, ``-`` never."""
    if not epoch:
        return "-"
    now = time.time() if now is None else now
    then, today = time.localtime(epoch), time.localtime(now)
    if then[:3] == today[:3]:
        return time.strftime("%H:%M:%S", then)
    return time.strftime("%b %d", then)


def detail_of(row: dict[str, Any]) -> str:
    """What ``roost agents`` shows after the dash: a dialog waiting for the user (its text
    and options), else the open question, else why it failed, else the summary, on one
    line."""
    if row.get("dialog"):
        return f"waits for you: {dialog_line(row.get('question'), row.get('dialogOptions'))} (a answers)"
    failure = failure_text(row)
    if failure:
        return " ".join(failure.split())
    return " ".join(((row.get("question") if row.get("state") == "needs_input" else row.get("summary")) or "").split())


def layout(rows: list[dict[str, Any]], group: str) -> list[tuple[str, Any, str, str]]:
    """Screen lines in ``roost agents`` order: ``("header", title, "", "")`` or
    ``("row", row, indent, meta)`` (meta: ``↳ parent`` where the tree is not shown by
    indentation)."""
    from roost_core.treeview import STATE_ORDER, tree_order

    out: list[tuple[str, Any, str, str]] = []
    if group == "dir":
        groups: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            groups.setdefault(row.get("cwd") or "?", []).append(row)
        for cwd in sorted(groups):
            out.append(("header", cwd, "", ""))
            ids = {row["id"] for row in groups[cwd]}
            for depth, row in tree_order(groups[cwd]):
                if depth == 0 and row.get("parent") and row["parent"] not in ids:
                    out.append(("row", row, "  ", f"↳ {row.get('parentName') or row['parent']}"))
                else:
                    out.append(("row", row, "  " + "   " * max(depth - 1, 0) + ("↳ " if depth else ""), ""))
    else:
        groups = {}
        for row in rows:
            groups.setdefault(row.get("state") or "?", []).append(row)
        for state in sorted(groups, key=lambda s: STATE_ORDER.index(s) if s in STATE_ORDER else len(STATE_ORDER)):
            out.append(("header", state, "", ""))
            for row in groups[state]:
                meta = f"↳ {row.get('parentName') or row['parent']}" if row.get("parent") else ""
                out.append(("row", row, "  ", meta))
    return out


def name_cell(row: dict[str, Any], indent: str, meta: str, chosen: bool, room: int | None = None) -> str:
    """``› ↳ ● name (id) ↳ parent`` cut to ``room`` (the name gives way first; the id stays)."""
    live = "●" if row.get("live") else "○"
    head = f"{'›' if chosen else ' '}{indent[1:]}{live} "
    suffix = f" ({row['id']})" + (f" {meta}" if meta else "")
    name = row["name"]
    if room is not None and len(head) + len(name) + len(suffix) > room:
        keep = max(room - len(head) - len(suffix) - 1, 1)
        name = name[:keep] + "…"
    cell = f"{head}{name}{suffix}"
    if room is not None and len(cell) > room:
        cell = cell[: room - 1] + "…"
    return cell


def resolve_row(rows: list[dict[str, Any]], ref: str) -> dict[str, Any]:
    """The agent row ``ref`` names, by the rule every command uses (an id, else an exact
    unique name; ``routing.resolve_ref``): raises ``not_found`` or ``ambiguous``."""
    from roost_core.routing import resolve_ref

    return resolve_ref(
        ref, rows, id_of=lambda row: row["id"], name_of=lambda row: row["name"], framed_of=lambda row: row.get("framedName"), what="agent"
    )


def find_row(rows: list[dict[str, Any]], ref: str | None) -> dict[str, Any] | None:
    """:func:`resolve_row`, or None when ``ref`` names no single row (yet)."""
    from roost_core.protocol import ProtocolError

    if not ref:
        return None
    try:
        return resolve_row(rows, ref)
    except ProtocolError:
        return None


def plain_lines(rows: list[dict[str, Any]], group: str, selected: dict[str, Any] | None) -> list[str]:
    """The ``--once`` text: each ``roost agents`` line with queued, last message and usage
    (and its tree's, on a root) inserted before the detail. With a ``selected`` row
    (``--select``) each line first says its relation to that row; without one there is
    no relation column: relations seen from an arbitrary row mean nothing in a plain
    listing."""
    from roost_core.treeview import tree_text, usage_text

    if not rows:
        return ["no agents"]
    seen_from = selected
    lines = []
    for kind, value, indent, meta in layout(rows, group):
        if kind == "header":
            lines.append(value)
            continue
        row = value
        live = "●" if row.get("live") else "○"
        host = f" [{row['host']}]" if row.get("host") else ""
        text = f"{indent}{live} {row['name'][:28]} ({row['id']}){host}  {label(row['state'], row.get('activity'))}"
        if meta:
            text += f"  {meta}"
        if seen_from is not None:
            text += f"  {relation(seen_from, row)}"
        text += f"  queued {row.get('pending') or 0}  last {last_message(row.get('lastMessage'))}"
        spent = usage_text(row.get("usage"))
        if spent:
            text += f"  [{spent}]"
        if not row.get("parent") and tree_text(row):
            text += f"  [{tree_text(row)}]"
        if background_text(row):
            text += f"  [{background_text(row)[:80]}]"
        if progress_text(row, time.time()):
            text += f"  [{progress_text(row, time.time())}]"
        detail = detail_of(row)
        if detail:
            text += f"  — {detail[:60]}"
        lines.append(text)
    return lines


def print_once(args: argparse.Namespace) -> int:
    from roost_core.client import connect

    with connect() as conn:
        raw = conn.call("agents")["agents"]
    # Looked up as the daemon sent them (a name as typed), drawn cleaned.
    chosen = resolve_row(raw, args.select)["id"] if args.select else None
    rows = clean_rows(raw)
    selected = next(row for row in rows if row["id"] == chosen) if chosen else None
    print("\n".join(plain_lines(rows, args.group, selected)))
    return 0


# ---------------------------------------------------------------------------- keys


_SEQUENCES = {
    "[A": "up", "OA": "up", "[B": "down", "OB": "down",
    "[C": "right", "OC": "right", "[D": "left", "OD": "left",
    "[5~": "pgup", "[6~": "pgdn",
    "[H": "home", "OH": "home", "[1~": "home", "[7~": "home",
    "[F": "end", "OF": "end", "[4~": "end", "[8~": "end",
}


def parse_keys(text: str) -> list[str]:
    """Key names from what one read of the terminal gave: ``up``, ``enter``, ``esc``,
    ``backspace``..., or the character itself. An escape sequence arrives in one read;
    a lone ESC is the Esc key."""
    keys: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\x1b":
            if i + 1 >= len(text) or text[i + 1] not in "[O":
                keys.append("esc")
                i += 1
                continue
            # CSI/SS3: parameters, then one final byte in @..~.
            j = i + 2
            while j < len(text) and not ("@" <= text[j] <= "~"):
                j += 1
            sequence = text[i + 1 : j + 1]
            keys.append(_SEQUENCES.get(sequence, "unknown"))
            i = j + 1
            continue
        if char in "\r\n":
            keys.append("enter")
            if char == "\r" and text[i + 1 : i + 2] == "\n":
                i += 1
        elif char in "\x7f\x08":
            keys.append("backspace")
        elif char == "\x15":
            keys.append("kill-line")
        elif char == "\t":
            keys.append("tab")
        elif char >= " ":
            keys.append(char)
        i += 1
    return keys


# ---------------------------------------------------------------------------- the live view


class View:
    """What the screen shows and what the keys do to it; I/O is the caller's."""

    def __init__(self, group: str = "dir", select: str | None = None) -> None:
        self.rows: list[dict[str, Any]] = []
        self.group = group
        self.selected: str | None = None
        self._select_ref = select
        self.index = 0
        self.mode = "tree"  # tree | log
        self.prompt: str | None = None  # "reply" | "stop" while the bottom line asks
        self.buffer = ""
        self.flash = ""
        self.connected = False
        self.scroll = 0  # first tree line shown
        self.log_id: str | None = None
        self.log_lines: list[str] = []
        self.log_top = 0
        self.log_follow = True
        self.log_width = 0
        self.log_texts: list[str] = []

    # ---------------------------------------------------------------- rows and selection

    def order(self) -> list[dict[str, Any]]:
        return [value for kind, value, _, _ in layout(self.rows, self.group) if kind == "row"]

    def set_rows(self, rows: list[dict[str, Any]]) -> None:
        # Looked up as the daemon sent them (a name as typed), drawn cleaned.
        chosen = find_row(rows, self._select_ref) if self._select_ref is not None else None
        self.rows = rows = clean_rows(rows)
        order = self.order()
        if self._select_ref is not None and chosen is not None:
            self.selected = chosen["id"]
            self._select_ref = None
        ids = [row["id"] for row in order]
        if self.selected in ids:
            self.index = ids.index(self.selected)
        elif ids:
            self.index = min(self.index, len(ids) - 1)
            self.selected = ids[self.index]
        else:
            self.index, self.selected = 0, None

    def current(self) -> dict[str, Any] | None:
        return next((row for row in self.rows if row["id"] == self.selected), None)

    def move(self, delta: int) -> None:
        order = self.order()
        if not order:
            return
        self.index = max(0, min(len(order) - 1, self.index + delta))
        self.selected = order[self.index]["id"]

    def toggle_group(self) -> None:
        self.group = "state" if self.group == "dir" else "dir"
        self.set_rows(self.rows)
        self.scroll = 0

    # ---------------------------------------------------------------- transcript

    def set_log(self, texts: list[str], width: int) -> None:
        self.log_texts = texts
        self.log_width = width
        lines: list[str] = []
        for text in texts:
            for line in printable(text, keep_newlines=True).split("\n"):
                lines.extend(textwrap.wrap(line, width, subsequent_indent="  ", replace_whitespace=False, drop_whitespace=False) or [""])
        self.log_lines = lines

    def scroll_log(self, delta: int, body: int) -> None:
        bottom = max(0, len(self.log_lines) - body)
        top = bottom if self.log_follow else self.log_top
        self.log_top = max(0, min(bottom, top + delta))
        self.log_follow = self.log_top >= bottom

    # ---------------------------------------------------------------- rendering

    def render(self, width: int, height: int) -> list[Any]:
        """The screen as rich ``Text`` lines, each cut to ``width``, at most ``height``."""
        from rich.text import Text

        width, height = max(width, 20), max(height, 6)
        lines = self._render_log(width, height) if self.mode == "log" else self._render_tree(width, height)
        lines.append(self._footer(width))
        out = []
        for line in lines[:height]:
            if isinstance(line, str):
                line = Text(line)
            line.no_wrap = True
            line.truncate(width, overflow="ellipsis")
            out.append(line)
        return out

    def _title(self, text: str, width: int) -> Any:
        from rich.text import Text

        status = "" if self.connected else "  [daemon connection lost — reconnecting]"
        return Text((text + status)[: width * 2].ljust(width), style="reverse")

    def _render_tree(self, width: int, height: int) -> list[Any]:
        from rich.text import Text

        seen_from = self.current()
        title = f"roost view · {len(self.rows)} agent{'s' if len(self.rows) != 1 else ''} · by {self.group}"
        if seen_from is not None:
            title += f" · seen from {seen_from['name']}"
        out: list[Any] = [self._title(title, width)]
        items = layout(self.rows, self.group)
        # The name column is as wide as the widest name needs (within bounds); what is
        # left of the line shows the question, status or summary.
        needed = max((len(name_cell(value, indent, meta, False)) + 1 for kind, value, indent, meta in items if kind == "row"), default=LEFT_MIN)
        left = max(LEFT_MIN, min(LEFT_MAX, needed, width - RIGHT_COLUMNS))
        detail_width = width - left - RIGHT_COLUMNS - 2
        columns = f"{'  agent':<{left}}{'relation':<9}{'state':<12}{'queued':>6} {'last msg':>8}"
        if detail_width >= DETAIL_MIN:
            columns += "  detail"
        out.append(Text(columns, style="dim"))
        body = height - len(out) - DETAIL_LINES - 1
        if not items:
            out.append(Text("  no agents", style="dim"))
        selected_line = next((n for n, item in enumerate(items) if item[0] == "row" and item[1]["id"] == self.selected), 0)
        # Keep the selected row on screen, and its group header too where it fits.
        if selected_line < self.scroll + 1:
            self.scroll = max(0, selected_line - 1)
        elif selected_line >= self.scroll + body:
            self.scroll = selected_line - body + 1
        self.scroll = max(0, min(self.scroll, max(0, len(items) - body)))
        for kind, value, indent, meta in items[self.scroll : self.scroll + body]:
            if kind == "header":
                out.append(Text(value, style="bold"))
            else:
                out.append(self._row_line(value, indent, meta, seen_from, left, detail_width))
        while len(out) < height - DETAIL_LINES - 1:
            out.append(Text(""))
        out.extend(self._detail(seen_from, width))
        return out

    def _row_line(self, row: dict[str, Any], indent: str, meta: str, seen_from: dict[str, Any] | None, left: int, detail_width: int) -> Any:
        from rich.text import Text

        chosen = row["id"] == self.selected
        state = row.get("state") or "?"
        line = Text(no_wrap=True)
        # Cut and padded by terminal cells, so wide characters keep the columns straight.
        cell = Text(name_cell(row, indent, meta, chosen, left - 1))
        cell.truncate(left - 1, overflow="ellipsis")
        cell.pad_right(left - cell.cell_len)
        line.append_text(cell)
        line.append(f"{relation(seen_from, row):<9}")
        line.append(f"{column_label(state, row.get('activity'), 11)[:11]:<12}", style=STATE_STYLES.get(state, ""))
        line.append(f"{row.get('pending') or 0:>6} {last_message(row.get('lastMessage')):>8}")
        detail = " · ".join(part for part in (row.get("status"), detail_of(row)) if part)
        if detail_width >= DETAIL_MIN and detail:
            needs = row.get("state") == "needs_input"
            line.append("  " + ("? " if needs else "") + " ".join(detail.split()), style="magenta" if needs else "dim")
        if chosen:
            line.stylize("reverse")
        return line

    def _detail(self, row: dict[str, Any] | None, width: int) -> list[Any]:
        from rich.text import Text

        if row is None:
            return [Text("─" * width, style="dim")] + [Text("")] * (DETAIL_LINES - 1)
        head = f"─ {row['name']} ({row['id']}) · {row['kind']}/{row.get('host') or '?'} · {row.get('cwd') or '?'} "
        lines = [Text(head + "─" * max(0, width - len(head)), style="dim")]
        facts = [f"state {label(str(row.get('state')), row.get('activity'))}"]
        if row.get("onMessage"):
            facts.append(str(row["onMessage"]))
        if row.get("status"):
            facts.append(f"status {row['status']}")
        if background_text(row):
            facts.append(background_text(row))
        if progress_text(row, time.time()):
            facts.append(progress_text(row, time.time()))
        facts.append(f"queued {row.get('pending') or 0}")
        facts.append(f"last message {last_message(row.get('lastMessage'))}")
        from roost_core.treeview import tree_text, usage_text

        if usage_text(row.get("usage")):
            facts.append(usage_text(row.get("usage")))
        if tree_text(row):
            facts.append(tree_text(row))
        lines.append(Text(" · ".join(facts)))

        def one_line(text: object) -> str:
            return " ".join(str(text).split())

        if row.get("dialog"):
            # Only a person answers a dialog: what it asks, and how to answer here.
            choices = f"  {options_text(row['dialogOptions'])}" if row.get("dialogOptions") else ""
            lines.append(Text(f"waits for you: {one_line(row.get('question') or '')}{choices}  (a: answer)", style="bold magenta"))
        elif row.get("question"):
            lines.append(Text(f"? {one_line(row['question'])}", style="bold magenta"))
        failure = failure_text(row)
        if failure:
            lines.append(Text(one_line(failure), style="bold red"))
        if row.get("summary") and row.get("summary") != row.get("question"):
            lines.append(Text(f"summary: {one_line(row['summary'])}"))
        while len(lines) < DETAIL_LINES:
            lines.append(Text(""))
        return lines[:DETAIL_LINES]

    def _render_log(self, width: int, height: int) -> list[Any]:
        from rich.text import Text

        row = next((r for r in self.rows if r["id"] == self.log_id), None)
        name = f"{row['name']} ({row['id']}) · {row['state']}" if row else self.log_id
        body = height - 2
        bottom = max(0, len(self.log_lines) - body)
        if self.log_follow:
            self.log_top = bottom
        self.log_top = max(0, min(self.log_top, bottom))
        shown = self.log_lines[self.log_top : self.log_top + body]
        where = f"{self.log_top + 1}-{self.log_top + len(shown)}/{len(self.log_lines)}" if self.log_lines else "empty"
        out: list[Any] = [self._title(f"transcript · {name} · {where}", width)]
        out.extend(Text(line) for line in shown)
        while len(out) < height - 1:
            out.append(Text(""))
        return out

    def _footer(self, width: int) -> Any:
        from rich.text import Text

        if self.prompt == "reply":
            row = self.current() if self.mode == "tree" else next((r for r in self.rows if r["id"] == self.log_id), None)
            label = f"reply to {row['name'] if row else '?'}: "
            room = max(1, width - len(label) - 1)
            shown = self.buffer[-room:]
            return Text(label, style="bold").append(shown + "▏")
        if self.prompt == "answer":
            row = self.current()
            choices = f" {options_text(row['dialogOptions'])} ·" if row and row.get("dialogOptions") else ""
            label = f"answer {row['name'] if row else '?'}:{choices} "
            room = max(1, width - len(label) - 1)
            return Text(label, style="bold").append(self.buffer[-room:] + "▏")
        if self.prompt == "stop":
            row = self.current()
            return Text(f"stop {row['name']} ({row['id']})? y/n" if row else "stop? y/n", style="bold yellow")
        if self.flash:
            return Text(self.flash, style="bold")
        return Text(LOG_HELP if self.mode == "log" else TREE_HELP, style="dim")


class LiveView:
    """The live view's I/O: the watch stream, the keys, the daemon ops, the screen."""

    def __init__(self, view: View, console: Any, screen: Any, paths: Any) -> None:
        self.view = view
        self.console = console
        self.screen = screen
        self.paths = paths
        self.client: Any = None
        self.pm: Any = None
        self.log_session: str | None = None
        #: The host of the peer whose transcript is open (how its lines read).
        self.log_host: str | None = None
        self.log_stamp: Any = None
        #: The receipts of the items the open transcript's job received, by seq (and
        #: that job's id; None for a foreground peer's transcript).
        self.log_receipts: dict[int, dict[str, Any]] = {}
        self.log_receipts_of: str | None = None
        self.tg: Any = None
        self.exit_code = 0
        #: The job ``t`` chose to attach: the view ends, ``roost attach`` runs, the view comes back.
        self.attach_to: str | None = None

    def draw(self) -> None:
        from rich.console import Group

        width, height = self.console.size
        if self.view.mode == "log" and self.view.log_width != width:
            self.view.set_log(self.view.log_texts, width)
        self.screen.update(Group(*self.view.render(width, height)))

    def on_event(self, frame: dict[str, Any]) -> None:
        if frame.get("event") == "agents" and isinstance(frame.get("agents"), list):
            self.view.set_rows(frame["agents"])
            if self.view.mode == "log":
                self.reload_log()
                if self.tg is not None and self.log_receipts_of is not None:
                    self.tg.start_soon(self.refresh_receipts, self.log_receipts_of)
            self.draw()

    async def refresh_receipts(self, job_id: str) -> None:
        """Ask again what the open transcript's received items' receipts say (seen,
        answered): they change without the file changing."""
        result = await self.call("log", job=job_id)
        if result is None or self.view.log_id != job_id:
            return
        from roost_core.transcript import received_by_seq  # here: `roost jobs` imports this module

        receipts = received_by_seq(result.get("received"))
        if receipts != self.log_receipts:
            self.log_receipts = receipts
            self.log_stamp = None  # drawn again with them
            self.reload_log()
            self.draw()

    async def main(self) -> int:
        import anyio

        async with anyio.create_task_group() as tg:
            self.tg = tg
            keys_send, keys_receive = anyio.create_memory_object_stream[str](256)
            tg.start_soon(self.watch)
            tg.start_soon(self.signals, tg.cancel_scope)
            tg.start_soon(read_keys, sys.stdin.fileno(), keys_send)
            async with keys_receive:
                async for key in keys_receive:
                    if key == "eof" or await self.handle(key) == "quit":
                        break
            tg.cancel_scope.cancel()
        return self.exit_code

    async def watch(self) -> None:
        """Follow the daemon's ``watch`` stream; reconnect when the daemon goes away."""
        import anyio

        from roost_core.client import AsyncClient, DaemonUnavailable

        while True:
            try:
                client = await AsyncClient.open(self.paths.socket, self.on_event)
            except DaemonUnavailable:
                await anyio.sleep(1.0)
                continue
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.run)
                try:
                    snapshot = await client.call("watch")
                except (DaemonUnavailable, OSError):
                    snapshot = None
                if snapshot is not None:
                    self.client = client
                    self.view.connected = True
                    self.view.set_rows(snapshot.get("agents") or [])
                    self.draw()
                    await client.closed.wait()
                tg.cancel_scope.cancel()
            self.client = None
            self.view.connected = False
            self.draw()
            await anyio.sleep(1.0)

    async def signals(self, scope: Any) -> None:
        import signal

        import anyio

        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGWINCH) as received:
            async for signum in received:
                if signum == signal.SIGWINCH:
                    self.draw()
                    continue
                self.exit_code = 128 + signum
                scope.cancel()
                return

    async def call(self, op: str, **args: Any) -> dict[str, Any] | None:
        """An op on the watch connection; a failure becomes the bottom line's message."""
        from roost_core.client import DaemonUnavailable
        from roost_core.protocol import ProtocolError

        if self.client is None:
            self.view.flash = "not connected to the daemon"
            return None
        try:
            answer: dict[str, Any] = await self.client.call(op, **args)
            return answer
        except ProtocolError as exc:
            self.view.flash = f"{op}: {exc.code}: {exc.message}"
        except DaemonUnavailable as exc:
            self.view.flash = f"{op}: {exc}"
        return None

    async def handle(self, key: str) -> str | None:
        view = self.view
        if key != "unknown":
            view.flash = ""
        if view.prompt == "reply":
            await self.handle_reply_key(key)
        elif view.prompt == "answer":
            await self.handle_answer_key(key)
        elif view.prompt == "stop":
            await self.handle_stop_key(key)
        elif view.mode == "log":
            self.handle_log_key(key)
        else:
            if key == "q":
                return "quit"
            if key == "t":
                return self.attach_key()
            await self.handle_tree_key(key)
        self.draw()
        return None

    async def handle_tree_key(self, key: str) -> None:
        view = self.view
        row = view.current()
        body = max(1, self.console.size[1] - DETAIL_LINES - 3)
        if key in ("up", "k"):
            view.move(-1)
        elif key in ("down", "j"):
            view.move(1)
        elif key == "pgup":
            view.move(-body)
        elif key == "pgdn":
            view.move(body)
        elif key == "home":
            view.move(-len(view.rows))
        elif key == "end":
            view.move(len(view.rows))
        elif key == "g":
            view.toggle_group()
        elif key in ("enter", "l", "right") and row is not None:
            await self.open_log(row)
        elif key == "r" and row is not None:
            self.start_reply(row)
        elif key == "a" and row is not None:
            if not row.get("dialog"):
                view.flash = f"{row['name']} has no dialog open"
            else:
                view.prompt, view.buffer = "answer", ""
        elif key == "s" and row is not None:
            if row["kind"] != "job":
                view.flash = f"{row['name']} is a foreground session; only jobs can be stopped here"
            else:
                view.prompt = "stop"

    def attach_key(self) -> str | None:
        """``t``: leave the view to attach the selected job (``roost attach``); the view
        comes back when the attached CLI exits (:func:`run_live`)."""
        row = self.view.current()
        if row is None or row["kind"] != "job":
            self.view.flash = "only a job can be attached (t); a foreground session is in its own terminal"
            return None
        self.attach_to = row["id"]
        return "quit"

    def start_reply(self, row: dict[str, Any]) -> None:
        if row["kind"] != "job":
            self.view.flash = f"{row['name']} is a foreground session; reply in its own terminal"
            return
        self.view.prompt = "reply"
        self.view.buffer = ""

    async def handle_reply_key(self, key: str) -> None:
        view = self.view
        if key == "esc":
            view.prompt, view.buffer = None, ""
        elif key == "backspace":
            view.buffer = view.buffer[:-1]
        elif key == "kill-line":
            view.buffer = ""
        elif key == "enter":
            target = view.log_id if view.mode == "log" else view.selected
            text, view.prompt, view.buffer = view.buffer, None, ""
            if not text.strip():
                view.flash = "reply: nothing to send"
                return
            result = await self.call("reply", job=target, text=text)
            if result is not None:
                from roost_core.cli_support import format_reply

                view.flash = format_reply(result)  # the line `roost reply` prints
        elif len(key) == 1:
            view.buffer += key

    async def handle_answer_key(self, key: str) -> None:
        """The answer prompt: an option or its number (a choice), else any text; Enter
        answers the selected row's dialog (op ``answer``, as ``roost answer`` does)."""
        view = self.view
        if key == "esc":
            view.prompt, view.buffer = None, ""
        elif key == "backspace":
            view.buffer = view.buffer[:-1]
        elif key == "kill-line":
            view.buffer = ""
        elif key == "enter":
            row = view.current()
            text, view.prompt, view.buffer = view.buffer, None, ""
            if row is None or not text.strip():
                view.flash = "answer: nothing to send"
                return
            result = await self.call("answer", job=row["id"], text=text)
            if result is not None:
                from roost_core.cli_support import format_answer

                view.flash = format_answer(result)  # the line `roost answer` prints
        elif len(key) == 1:
            view.buffer += key

    async def handle_stop_key(self, key: str) -> None:
        view = self.view
        row = view.current()
        view.prompt = None
        if key in ("y", "Y") and row is not None:
            result = await self.call("stop", job=row["id"])
            if result is not None:
                view.flash = f"{row['name']} ({row['id']}): stopped (was {result.get('was')})"
        else:
            view.flash = "not stopped"

    def handle_log_key(self, key: str) -> None:
        view = self.view
        body = max(1, self.console.size[1] - 2)
        if key in ("esc", "q", "left", "h"):
            view.mode = "tree"
            view.log_id = None
        elif key in ("up", "k"):
            view.scroll_log(-1, body)
        elif key in ("down", "j", "enter"):
            view.scroll_log(1, body)
        elif key in ("pgup", "b"):
            view.scroll_log(-body, body)
        elif key in ("pgdn", " "):
            view.scroll_log(body, body)
        elif key in ("home", "g"):
            view.scroll_log(-len(view.log_lines), body)
        elif key in ("end", "G"):
            view.scroll_log(len(view.log_lines), body)
        elif key == "r":
            row = next((r for r in view.rows if r["id"] == view.log_id), None)
            if row is not None:
                self.start_reply(row)

    async def open_log(self, row: dict[str, Any]) -> None:
        session = row.get("session")
        if row["kind"] == "job":
            result = await self.call("log", job=row["id"])
            if result is None:
                return
            session = result.get("session")
            from roost_core.transcript import received_by_seq

            self.log_receipts = received_by_seq(result.get("received"))
            self.log_receipts_of = row["id"]
        else:
            self.log_receipts, self.log_receipts_of = {}, None
        if not session:
            self.view.flash = f"{row['name']} has no session file"
            return
        self.view.mode = "log"
        self.view.log_id = row["id"]
        self.view.log_follow = True
        self.log_session = session
        self.log_host = row.get("host")
        self.log_stamp = None
        self.reload_log()

    def reload_log(self) -> None:
        """Render the open transcript again if its file changed since the last time, read
        as its host writes it (``HostSpec.transcript_entries``)."""
        from roost_core.hosts import registered_hosts, session_lines, transcript_reader
        from roost_core.transcript import iter_rendered

        if self.pm is None:
            from roost_core.cli_support import local_manager

            self.pm = local_manager()
        session = self.log_session
        spec = registered_hosts(self.pm).get(self.log_host or "")
        stamp: Any = None
        lines: list[dict[str, Any]] | None = None
        if session is not None and spec is not None and spec.transcript_lines is not None:
            # A session kept in several files: the stamp is what they hold.
            lines = session_lines(spec, session)
            stamp = (len(lines), hash(repr(lines[-1])) if lines else 0)
        elif session is not None:
            try:
                info = os.stat(session)
                stamp = (info.st_size, info.st_mtime_ns)
            except OSError:
                pass
        if stamp is not None and stamp == self.log_stamp:
            return
        self.log_stamp = stamp
        read = transcript_reader(spec)
        texts = list(iter_rendered(self.pm, session, read, self.log_receipts, lines)) if session is not None and stamp is not None else []
        self.view.set_log(texts, self.console.size[0])


async def read_keys(fd: int, sink: Any) -> None:
    """Read the terminal in a thread; each read's keys go to ``sink`` (``eof`` at the end)."""
    import select
    import threading

    import anyio
    import anyio.from_thread
    import anyio.to_thread

    stop = threading.Event()
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def reader() -> None:
        try:
            while not stop.is_set():
                ready, _, _ = select.select([fd], [], [], 0.1)
                if not ready:
                    continue
                data = os.read(fd, 1024)
                keys = parse_keys(decoder.decode(data)) if data else ["eof"]
                for key in keys:
                    # Waits while the view is busy (a paste), rather than dropping keys.
                    anyio.from_thread.run(sink.send, key)
                if not data:
                    return
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, RuntimeError, OSError):
            return  # the view is gone or going

    try:
        async with sink:
            await anyio.to_thread.run_sync(reader, abandon_on_cancel=True)
    finally:
        stop.set()


@contextmanager
def cbreak(fd: int) -> Iterator[None]:
    """Keys without Enter and without echo; the terminal's settings back on the way out."""
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def run_live(args: argparse.Namespace) -> int:
    import anyio
    from rich.console import Console

    from roost_core.client import connect
    from roost_core.paths import resolve_paths

    paths = resolve_paths()
    # Start the daemon if none answers, before the screen is taken over.
    connect(paths).close()
    select = args.select
    while True:
        view = View(group=args.group, select=select)
        console = Console(highlight=False)
        with console.screen(hide_cursor=True) as screen, cbreak(sys.stdin.fileno()):
            live = LiveView(view, console, screen, paths)
            live.draw()
            code = anyio.run(live.main)
        if live.attach_to is None:
            return code
        # ``t``: the terminal is the attached CLI's until it exits, then the view's again.
        import subprocess

        subprocess.call([sys.executable, "-m", "roost_core.cli", "attach", live.attach_to])
        select = live.attach_to


def main(argv: list[str] | None = None) -> int:
    """``python -m roost_core.view``: the same as ``roost view``, with the same error
    boundary (``roost: CODE: message``)."""
    from roost_core.cli_support import Parser, guarded

    parser = Parser(prog="roost view", description="A live view of the agent tree (plain text when not a terminal).")
    add_arguments(parser)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return guarded(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
