"""A foreground pi: the interactive TUI in tmux with the roost extension installed by
``roost pi install``. The user's prompt makes the model spawn a pi child; the child's
report comes back by itself, drawn as the framed block and written to the session file."""

from __future__ import annotations

import json

import pytest
from pikit import agent_items

from roost_core import locks
from roost_core.transcript import read_entries


@pytest.mark.parametrize(
    ("name", "drawn"),
    [
        ("kid", "kid"),
        # A name is kept as typed (issue 39 point 12): pi draws its bidi marks as escapes.
        ("\u202ekid\u200f", "\\u202ekid\\u200f"),
    ],
    ids=["plain", "bidi"],
)
def test_foreground_pi_spawns_a_child_and_shows_its_report(pi_kit, write_config, tmp_path, name, drawn):
    write_config({"defaultHost": "pi"})
    scenario = {
        "run": [
            {"kind": "reply", "steps": [{"spawn": {"task": "say hello", "name": name, "model": "kid"}}, {"say": "spawned the kid"}]},
            {"kind": "report", "steps": [{"say": "thanks, kid"}]},
        ],
        "default": {"steps": [{"say": "ok"}]},
        "models": {"kid": {"default": {"steps": [{"say": "hello from the kid"}]}}},
    }
    fake = pi_kit.fake(scenario)
    daemon = pi_kit.daemon()
    pi_kit.require_socket_command()
    installed = pi_kit.roost("pi", "install", "--json")
    settings = json.loads((pi_kit.agent_dir / "settings.json").read_text())
    assert json.loads(installed.stdout)["extension"] in settings["extensions"]

    work = tmp_path / "work"
    work.mkdir()
    session_file = tmp_path / "fg" / "main.jsonl"
    tmux = pi_kit.tmux_start("fg", [pi_kit.pi, "--session", str(session_file)], cwd=work)
    # The extension shows "✉ roost" in the footer once its tools are registered.
    pi_kit.wait_screen(tmux, "✉ roost")
    pi_kit.type_line(tmux, "please delegate the greeting")

    pi_kit.wait_screen(tmux, f"✉ report from {drawn} (child)", timeout=60)
    screen = pi_kit.wait_screen(tmux, "thanks, kid", timeout=30)
    assert "\u202e" not in screen and "\u200f" not in screen
    assert "✉ roost f" in screen  # joined as a peer (a foreground id) with its first roost call
    assert "hello from the kid" in screen

    entries = read_entries(session_file)
    reports = [e for e in agent_items(entries) if e["details"]["kind"] == "report"]
    assert len(reports) == 1
    assert reports[0]["details"]["fromName"] == name and reports[0]["details"]["relation"] == "child"
    assert "hello from the kid" in reports[0]["content"]
    # The foreground pi holds its session's writer lock, as psutil sees it: the start time
    # it wrote (asked of `roost pi start-time`) is the one roost reads, not null.
    holder = locks.lock_holder(session_file)
    assert holder is not None
    assert locks.read_lock(session_file) == {"pid": holder, "createTime": locks.create_time(holder)}
    # The child is a pi job of this session's tree.
    (kid,) = [row for row in daemon.call("jobs")["jobs"] if row["name"] == name]
    assert kid["host"] == "pi" and kid["parentSession"] == str(session_file)
    # The report reached the model framed, after the first answer.
    framed = [r for r in fake.requests() if r["model"] == "fake-model" and any('kind="report"' in str(m.get("content")) for m in r["messages"])]
    assert framed
