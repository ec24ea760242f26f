"""``roost view`` in a real 80x24 terminal (a tmux server of the test's own) on a live tree
of scripted agents, and its plain-text form when stdout is not a terminal."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from conftest import user_messages, wait_until

TMUX = shutil.which("tmux")
# CI installs tmux and sets ROOST_REQUIRE_TMUX=1, so there these tests can never skip.
if TMUX is None and os.environ.get("ROOST_REQUIRE_TMUX") == "1":
    raise RuntimeError("ROOST_REQUIRE_TMUX=1 but tmux is not installed")
needs_tmux = pytest.mark.skipif(TMUX is None, reason="tmux is not installed")
SCREEN_TIMEOUT = 15.0

QUIET = {"default": {"steps": [{"say": "ok: {input}"}]}}


def tree_scenario(gate: Path) -> dict:
    """A lead that spawns kid-a (waits on ``gate``) and kid-b (asks at once)."""
    return {
        "run": [
            {
                "steps": [
                    {"spawn": {"task": "build it", "name": "kid-a", "model": "slow"}},
                    {"spawn": {"task": "pick a db", "name": "kid-b", "model": "asker"}},
                    {"say": "spawned two"},
                ]
            }
        ],
        "default": {"steps": [{"say": "noted {from_name}"}]},
        "models": {
            "slow": {"run": [{"steps": [{"wait_for": str(gate)}, {"say": "A is built"}]}]},
            "asker": {"run": [{"steps": [{"ask": "Which DB?"}]}], "default": {"steps": [{"say": "B uses {input}"}]}},
        },
    }


class Terminal:
    """A tmux server on a socket of its own with one 80x24 pane (no status line, so the
    program gets all 24 rows; the pane stays after the program exits so its exit status
    can be read)."""

    def __init__(self, tmp_path: Path, env: dict[str, str]) -> None:
        self.socket = f"roost-view-{uuid.uuid4().hex[:10]}"
        self.config = tmp_path / "tmux.conf"
        self.config.write_text("set -g status off\nset -g remain-on-exit on\nset -s escape-time 0\n")
        self.env = {key: value for key, value in env.items() if key not in ("TMUX", "TMUX_PANE")}
        self.home = env["ROOST_HOME"]
        self.exit_file = tmp_path / "view-exit-status"

    def tmux(self, *args: str) -> str:
        result = subprocess.run(
            [TMUX, "-L", self.socket, "-f", str(self.config), *args], env=self.env, capture_output=True, text=True, timeout=10
        )
        assert result.returncode == 0, f"tmux {args[0]}: {result.stderr}"
        return result.stdout

    def start_view(self, *args: str, before: str = "", after: str = "") -> None:
        """Run the view in the pane through a shell that writes its exit status to a file
        (tmux loses the status of a program that exits at once)."""
        view = f"env ROOST_HOME={shlex.quote(self.home)} {shlex.quote(sys.executable)} -m roost_core.view {shlex.join(args)}"
        command = f"{before}{view}; echo $? > {shlex.quote(str(self.exit_file))}{after}"
        self.tmux("new-session", "-d", "-s", "view", "-x", "80", "-y", "24", "-c", self.home, command)

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "view", *keys)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", "view", "-l", text)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "view")

    def wait_for(self, check: Callable[[str], object], what: str, timeout: float = SCREEN_TIMEOUT) -> str:
        """Capture the pane until ``check(screen)`` holds; the last screen in the error."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if check(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; the screen:\n{screen}")
            time.sleep(0.05)

    def wait_exit(self) -> int:
        """The view's exit status, once it has exited."""
        return int(wait_until(lambda: self.exit_file.exists() and self.exit_file.read_text().strip(), timeout=SCREEN_TIMEOUT, what="the view to exit"))

    def program_pid(self) -> int:
        shell = psutil.Process(int(self.tmux("display", "-p", "-t", "view", "#{pane_pid}")))
        return wait_until(lambda: next((c.pid for c in shell.children() if "roost_core.view" in " ".join(c.cmdline())), None), what="the view process")

    def close(self) -> None:
        """Kill the server and remove its socket file (tmux 3.3 leaves it behind)."""
        where = subprocess.run([TMUX, "-L", self.socket, "display", "-p", "#{socket_path}"], env=self.env, capture_output=True, text=True, timeout=10)
        subprocess.run([TMUX, "-L", self.socket, "kill-server"], env=self.env, capture_output=True, timeout=10)
        default = Path(self.env.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}" / self.socket
        Path(where.stdout.strip() or default).unlink(missing_ok=True)


@pytest.fixture
def terminal(daemon, tmp_path):
    term = Terminal(tmp_path, daemon.env)
    yield term
    term.close()


def line_of(screen: str, name: str) -> str:
    """The screen line of the peer called ``name`` ('' if none)."""
    return next((line for line in screen.splitlines() if re.search(rf"[●○] {re.escape(name)} \(", line)), "")


def footer(screen: str) -> str:
    return screen.rstrip("\n").splitlines()[-1]


@needs_tmux
def test_live_view_follows_the_tree_and_replies(daemon, terminal, tmp_path):
    gate = tmp_path / "gate"
    lead = daemon.start_job("delegate", name="lead", scenario=tree_scenario(gate))
    terminal.start_view()

    def tree_shown(screen: str) -> bool:
        return "running" in line_of(screen, "kid-a") and "needs_input" in line_of(screen, "kid-b") and bool(line_of(screen, "lead"))

    screen = terminal.wait_for(tree_shown, "lead, kid-a running and kid-b asking")
    lines = screen.splitlines()
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
    assert lines[0].startswith("roost view · 3 agents · by dir · seen from lead")
    at = {name: lines.index(line_of(screen, name)) for name in ("lead", "kid-a", "kid-b")}
    assert at["lead"] < at["kid-a"] < at["kid-b"]
    assert line_of(screen, "lead").startswith("› ● lead (") and " self " in line_of(screen, "lead")
    for kid in ("kid-a", "kid-b"):
        assert re.match(rf"  ↳ [●○] {kid} \(", line_of(screen, kid)) and " child " in line_of(screen, kid)
    assert "? Which DB?" in line_of(screen, "kid-b")

    # A change on the daemon reaches the screen with no key pressed.
    gate.write_text("go")
    terminal.wait_for(lambda s: " done " in line_of(s, "kid-a"), "kid-a done on screen")

    # Select kid-b; relations are now seen from it.
    terminal.keys("j", "j")
    screen = terminal.wait_for(lambda s: line_of(s, "kid-b").startswith("›"), "kid-b selected")
    assert " parent " in line_of(screen, "lead") and " sibling " in line_of(screen, "kid-a") and " self " in line_of(screen, "kid-b")
    assert any(line.startswith("? Which DB?") for line in screen.splitlines())  # the selected peer's detail

    # Reply from the view: it reaches kid-b's transcript, and kid-b answers it.
    kid_b = next(r["id"] for r in daemon.call("jobs")["jobs"] if r["name"] == "kid-b")
    terminal.keys("r")
    terminal.wait_for(lambda s: footer(s).startswith("reply to kid-b:"), "the reply prompt")
    terminal.type("use postgres")
    terminal.wait_for(lambda s: "use postgres" in footer(s), "the typed text")
    terminal.keys("Enter")
    wait_until(lambda: "use postgres" in user_messages(daemon.entries(kid_b)), what="the reply in kid-b's transcript")
    screen = terminal.wait_for(lambda s: " done " in line_of(s, "kid-b"), "kid-b done")
    assert footer(screen).startswith(f"{kid_b}: reply is item 2 of the job's queue (its seq); ") or "B uses use postgres" in screen

    # Its transcript, rendered by the render plugin; Esc goes back.
    terminal.keys("Enter")
    screen = terminal.wait_for(lambda s: "assistant: B uses use postgres" in s, "kid-b's transcript")
    assert screen.splitlines()[0].startswith(f"transcript · kid-b ({kid_b})")
    assert "› you: use postgres" in screen and "assistant: Which DB?" in screen
    terminal.keys("Escape")
    terminal.wait_for(lambda s: s.startswith("roost view ·"), "back to the tree")

    # Stop asks first; n keeps the job, y stops it.
    terminal.keys("k", "s")
    terminal.wait_for(lambda s: footer(s).startswith("stop kid-a ("), "the stop question")
    terminal.keys("n")
    terminal.wait_for(lambda s: footer(s) == "not stopped", "not stopped")
    terminal.keys("s")
    terminal.wait_for(lambda s: footer(s).startswith("stop kid-a ("), "the stop question again")
    terminal.keys("y")
    terminal.wait_for(lambda s: " stopped " in line_of(s, "kid-a"), "kid-a stopped on screen")
    assert daemon.job(next(r["id"] for r in daemon.call("jobs")["jobs"] if r["name"] == "kid-a"))["state"] == "stopped"

    # g groups by state, with the parent named in the row.
    terminal.keys("g")
    screen = terminal.wait_for(lambda s: "by state" in s.splitlines()[0], "grouped by state")
    assert "stopped" in screen.splitlines() and "↳ lead" in line_of(screen, "kid-a")

    terminal.keys("q")
    assert terminal.wait_exit() == 0
    assert lead in {r["id"] for r in daemon.call("agents")["agents"]}


@needs_tmux
def test_sigterm_gives_the_terminal_back(daemon, terminal, tmp_path):
    daemon.start_job("hello", name="solo", scenario=QUIET)
    before, after = tmp_path / "stty-before", tmp_path / "stty-after"
    terminal.start_view(before=f"stty -g > {before}; ", after=f"; stty -g > {after}")
    terminal.wait_for(lambda s: bool(line_of(s, "solo")), "the view")
    psutil.Process(terminal.program_pid()).terminate()
    assert terminal.wait_exit() == 128 + signal.SIGTERM
    wait_until(lambda: after.exists() and after.read_text(), what="the terminal settings after the view")
    assert after.read_text() == before.read_text()


@needs_tmux
def test_once_prints_the_tree_on_a_terminal_and_exits(daemon, terminal):
    daemon.wait_job(daemon.start_job("hello", name="solo", scenario=QUIET))
    terminal.start_view("--once")
    assert terminal.wait_exit() == 0
    screen = terminal.screen()
    # A plain listing has no peer to see relations from: no "self", no relation column.
    assert "solo (" in line_of(screen, "solo") and "  done  queued 0  last " in line_of(screen, "solo")


def test_plain_output_in_a_pipe_is_roost_agents_plus_columns(daemon, tmp_path):
    lead = daemon.start_job(
        "delegate",
        name="lead",
        scenario={
            "run": [{"steps": [{"spawn": {"task": "work", "name": "kid", "model": "quick"}}, {"say": "spawned"}]}],
            "default": {"steps": [{"say": "noted {from_name}"}]},
            "models": {"quick": QUIET},
        },
    )
    wait_until(lambda: len(daemon.call("jobs")["jobs"]) == 2, what="the kid")
    kid = next(r["id"] for r in daemon.call("jobs")["jobs"] if r["name"] == "kid")
    daemon.wait_job(kid)
    # Settled for good: the lead has had the kid's report and answered it.
    wait_until(lambda: (row := daemon.job(lead))["summary"] == "noted kid" and row["state"] == "done" and row["pending"] == 0, what="the lead noted the kid")

    def roost(*args: str) -> str:
        result = subprocess.run([sys.executable, "-m", *args], env=daemon.env, capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, result.stderr
        return result.stdout

    agents = roost("roost_core.cli", "agents").splitlines()
    view = roost("roost_core.view").splitlines()
    assert len(view) == len(agents)
    for plain, extended in zip(agents, view, strict=True):
        # The same line, with the columns inserted before the detail.
        assert extended.startswith(plain.split("  — ")[0]), (plain, extended)
        if "  — " in plain:
            assert extended.endswith("  — " + plain.split("  — ", 1)[1])
    lead_line = next(line for line in view if f"lead ({lead})" in line)
    kid_line = next(line for line in view if f"kid ({kid})" in line)
    assert re.search(r"  done  queued 0  last \d\d:\d\d:\d\d  — noted kid$", lead_line)
    assert "↳" in kid_line and re.search(r"  done  queued 0  last (-|\d\d:\d\d:\d\d)  — ok: work$", kid_line)

    from_kid = roost("roost_core.view", "--once", "--group", "state", "--select", "kid").splitlines()
    assert any(f"lead ({lead})" in line and "  parent  queued 0" in line for line in from_kid)
    assert any(f"kid ({kid})" in line and "↳ lead  self  queued 0" in line for line in from_kid)


# ---------------------------------------------------------------------------- the screen model


def synthetic_rows(count: int) -> list[dict]:
    """A root, a long chain under it, wide and hostile names, and an external peer."""
    rows = [{"id": "aaaa0000", "name": "root", "kind": "job", "state": "running", "live": True, "cwd": "/w", "session": "/s/root", "parent": None, "parentSession": None, "rootSession": None, "pending": 2, "summary": "x" * 200}]
    for n in range(1, count):
        parent = rows[max(0, n - 2)]
        rows.append({
            "id": f"{n:08x}", "name": ("名前" * 20 if n % 3 else "evil\x1b[2J\nname") + str(n), "kind": "job", "state": "needs_input" if n % 2 else "done",
            "live": bool(n % 2), "cwd": "/w" if n % 5 else "/other/" + "d" * 100, "session": f"/s/{n}", "parent": parent["id"],
            "parentName": parent["name"], "parentSession": parent["session"], "rootSession": "/s/root", "pending": n, "question": "why?\x07" * 30,
            "lastMessage": time.time(), "status": "tool: bash",
        })
    rows.append({"id": "ffff0001", "name": "outsider", "kind": "foreground", "state": "connected", "live": True, "cwd": "/w", "session": "/s/out", "parent": None, "parentSession": None, "rootSession": None, "pending": 0})
    return rows


@pytest.mark.parametrize("size", [(80, 24), (40, 12), (200, 60)])
def test_the_screen_fits_the_terminal_whatever_the_rows(size):
    from roost_core.view import View

    width, height = size
    view = View()
    view.set_rows(synthetic_rows(40))
    for key_moves in (0, 25, 40):
        view.move(key_moves)
        for group in ("dir", "state"):
            view.group = group
            lines = view.render(width, height)
            assert len(lines) == height
            assert all(line.cell_len <= width for line in lines)
            text = "\n".join(line.plain for line in lines)
            assert "\x1b" not in text and "\x07" not in text
            assert any(line.plain.startswith("›") for line in lines), "the selected row is on screen"


def test_relation_is_the_reach_plugins_on_agent_rows():
    from roost_core.records import PeerInfo
    from roost_core.view import relation
    from roost_plugins.reach import relation_between

    def info(row):
        return PeerInfo(id=row["id"], name=row["name"], kind=row["kind"], state=row["state"], session=row.get("session"),
                        parent_session=row.get("parentSession"), parent_peer=row.get("parent"), root_session=row.get("rootSession"))

    rows = synthetic_rows(8)
    for me in rows:
        for other in rows:
            if other is not me:
                assert relation(me, other) == relation_between(info(me), info(other)), (me["id"], other["id"])
    assert {relation(rows[1], row) for row in rows} >= {"self", "parent", "child", "sibling", "tree", "external"}


def test_keys_from_raw_terminal_input():
    from roost_core.view import parse_keys

    assert parse_keys("jk\x1b[A\x1b[B\x1bOA\r\n\x1b\x7fé") == ["j", "k", "up", "down", "up", "enter", "esc", "backspace", "é"]
    assert parse_keys("\x1b[5~\x1b[6~\x1b[1;5A\n") == ["pgup", "pgdn", "unknown", "enter"]


@needs_tmux
def test_a_dialog_shows_in_the_view_and_is_answered_there(daemon, terminal):
    scenario = {"run": [{"steps": [{"dialog": "Ship it?", "options": ["ship", "wait"]}, {"say": "went on"}]}], "default": QUIET["default"]}
    job = daemon.start_job("release", name="shipper", scenario=scenario)
    wait_until(lambda: daemon.job(job)["dialog"], what="the dialog")
    terminal.start_view()
    screen = terminal.wait_for(lambda s: "waits for you" in line_of(s, "shipper"), "the dialog in the row")
    # The selected row's detail: its text, its numbered options, and the key that answers.
    assert any(line.startswith("waits for you: Ship it?  1) ship  2) wait  (a: answer)") for line in screen.splitlines()), screen

    terminal.keys("a")
    terminal.wait_for(lambda s: footer(s).startswith("answer shipper: 1) ship  2) wait ·"), "the answer prompt")
    terminal.type("7")
    terminal.keys("Enter")
    terminal.wait_for(lambda s: footer(s).startswith("answer: not_an_option: '7' is not one of"), "the refusal")
    assert daemon.job(job)["dialog"]

    terminal.keys("a")
    terminal.wait_for(lambda s: footer(s).startswith("answer shipper:"), "the answer prompt again")
    terminal.type("ship")
    terminal.keys("Enter")
    row = daemon.wait_job(job, "done")
    assert row["summary"] == "went on"
    terminal.wait_for(lambda s: " done " in line_of(s, "shipper") and "waits for you" not in s, "the dialog gone from the view")
    terminal.keys("q")
    assert terminal.wait_exit() == 0


@needs_tmux
def test_the_views_transcript_says_what_became_of_each_received_item(daemon, terminal):
    """A received agent item's receipt under it in the transcript (issue 42.4): the lead's
    scripted model call after the kid's report has it, so the report is seen."""
    scenario = {
        "run": [{"steps": [{"spawn": {"task": "count the apples", "name": "kid", "model": "kid"}}, {"say": "spawned"}]}],
        "default": {"steps": [{"say": "noted {from_name}"}]},
        "models": {"kid": {"default": {"steps": [{"say": "12 apples"}]}}},
    }
    lead = daemon.start_job("delegate", name="lead", scenario=scenario)

    def report_seen() -> dict | None:
        return next((r for r in daemon.call("log", job=lead)["received"] if r["kind"] == "report" and r["state"] == "seen"), None)

    receipt = wait_until(report_seen, what="the kid's report seen by the lead")
    terminal.start_view("--select", "lead")
    terminal.wait_for(lambda s: line_of(s, "lead").startswith("›"), "lead selected")
    terminal.keys("Enter")
    screen = terminal.wait_for(lambda s: "assistant: noted kid" in s, "the lead's transcript")
    lines = screen.splitlines()
    note = next(n for n, line in enumerate(lines) if line.startswith("↳ seen · seen "))
    assert any("report" in line and "kid" in line for line in lines[:note]), screen
    assert lines[note].split(" · seen ")[1].strip() == time.strftime("%H:%M:%S", time.localtime(receipt["seen"]))
    terminal.keys("q")


@needs_tmux
def test_a_hibernated_childs_state_column_says_hibernated_as_its_detail_and_once_do(daemon_factory, write_config, tmp_path):
    """Issue 54 point 4: the interactive view's state column said ``done`` for a hibernated
    child while its detail line (``state done, hibernated``) and ``--once`` said
    ``hibernated``; the column now says what the others say."""
    write_config({"hibernateAfterSeconds": 1})
    daemon = daemon_factory().start()
    daemon.start_job("delegate", name="lead", scenario={
        "run": [{"steps": [{"spawn": {"task": "build it", "name": "kid", "model": "quick"}}, {"say": "spawned"}]}],
        "default": {"steps": [{"say": "noted {from_name}"}]},
        "models": {"quick": {"default": {"steps": [{"say": "built"}]}}},
    })
    kid = wait_until(lambda: next((r["id"] for r in daemon.call("jobs")["jobs"] if r["name"] == "kid"), None), what="the kid")
    wait_until(lambda: (row := daemon.job(kid))["state"] == "done" and not row["live"], what="the kid hibernated")
    once = subprocess.run([sys.executable, "-m", "roost_core.view", "--once"], env=daemon.env, capture_output=True, text=True, timeout=30)
    assert "done, hibernated" in line_of(once.stdout, "kid"), once.stdout
    terminal = Terminal(tmp_path, daemon.env)
    try:
        terminal.start_view()
        screen = terminal.wait_for(lambda s: bool(line_of(s, "kid")) and bool(line_of(s, "lead")), "the tree")
        assert " hibernated " in line_of(screen, "kid"), screen
        # Selected, its detail line says the same.
        terminal.keys("j")
        screen = terminal.wait_for(lambda s: line_of(s, "kid").startswith("›"), "kid selected")
        assert any(line.startswith("state done, hibernated") for line in screen.splitlines()), screen
        terminal.keys("q")
        assert terminal.wait_exit() == 0
    finally:
        terminal.close()
