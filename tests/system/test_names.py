"""Job names (issue 39, points 6 and 12), through the user's paths: the agent tool on the
scripted host and a foreground session, the socket op, and the ``roost`` command in a
subprocess against a real daemon.

One rule names every job (start, spawn by op or tool): kept as typed, refused only when
unusable, never the name (as typed or framed) or id of another job; a chosen name that is
taken is refused (``name_taken``, naming a free one), a derived one gets a suffix. Lookups
take both forms exactly; terminals get escapes, never a raw control or bidi character.
"""

from __future__ import annotations

import json
import re

import pytest
from clikit import Cli, stop_live_jobs
from conftest import agent_items, wait_until
from fg import in_thread, run_async, send, session

from roost_core.protocol import ProtocolError
from roost_plugins.envelope import parse_envelopes, sanitize

QUIET = {"default": {"steps": [{"say": "ok: {input}"}]}}
#: What a terminal must never get raw from a name: controls, bidi marks and overrides,
#: line and paragraph separators.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


@pytest.fixture
def cli(daemon, tmp_path):
    run = Cli(daemon.env, tmp_path)
    yield run
    stop_live_jobs(daemon)


def tool_results(entries, tool: str) -> list[str]:
    return [
        e["message"]["content"][0]["text"]
        for e in entries
        if e.get("type") == "message" and e["message"].get("role") == "toolResult" and e["message"].get("toolName") == tool
    ]


def start(cli, task: str, name: str | None = None, *extra: str) -> dict:
    args = ["start", task, "--host", "scripted", "--scenario", json.dumps(QUIET), *extra]
    if name is not None:
        args += ["--name", name]
    return cli.json(*args)


# ---------------------------------------------------------------------------- point 6


def test_roost_spawn_keeps_the_name_rule_of_start(cli, daemon):
    """The agent tool, driven by the scripted host: a second ``solo``, the lead's own id and
    another job's name are refused, each result saying why and which name is free; a
    child named from its task gets a suffix. ``roost stop solo`` then finds one job."""
    other = start(cli, "someone else's job", "other")["id"]
    scenario = {
        "run": [
            {
                "steps": [
                    {"spawn": {"task": "first", "name": "solo", "model": "quick"}},
                    {"spawn": {"task": "second", "name": "solo", "model": "quick"}},
                    {"spawn": {"task": "mine", "name": "{job}", "model": "quick"}},
                    {"spawn": {"task": "theirs", "name": "other", "model": "quick"}},
                    {"spawn": {"task": "solo", "model": "quick"}},
                    {"say": "spawned"},
                ]
            }
        ],
        "default": {"steps": [{"say": "noted"}]},
        "models": {"quick": QUIET},
    }
    lead = cli.json("start", "delegate", "--name", "lead", "--host", "scripted", "--scenario", json.dumps(scenario))["id"]
    results = wait_until(lambda: (found := tool_results(daemon.entries(lead), "roost_spawn")) and len(found) == 5 and found, what="five spawn results")
    first = re.fullmatch(r"spawned solo \(([0-9a-f]{8})\); .*", results[0])
    assert first, results[0]
    solo = first[1]
    assert re.fullmatch(
        rf"error \(name_taken\): 'solo' is already the name of job {solo} \(\w+\); choose another name \(such as 'solo-2'\), "
        rf"leave the name out, or remove that job first \(roost rm {solo}\)",
        results[1],
    ), results[1]
    assert results[2].startswith(f"error (name_taken): '{lead}' is already the id of job {lead} (running)"), results[2]
    assert results[3].startswith(f"error (name_taken): 'other' is already the name of job {other} "), results[3]
    assert re.fullmatch(r"spawned solo-2 \([0-9a-f]{8}\); .*", results[4]), results[4]
    names = sorted(row["name"] for row in cli.json("jobs"))
    assert names == ["lead", "other", "solo", "solo-2"]
    # The name the model used still finds exactly one job, in every command.
    assert cli("stop", "solo").stdout.startswith(f"{solo}: stopped (was ")


def test_a_name_a_child_holds_is_taken_for_start_spawn_op_and_tool_alike(cli, daemon, tmp_path):
    """A foreground session's child ``kid`` (through ``roost_spawn``): the tool, the
    ``spawn`` op and ``roost start`` all refuse a second ``kid`` with ``name_taken``."""

    async def story():
        async with session(daemon, tmp_path) as lead:
            ok, text, data = await lead.call_tool("roost_spawn", {"task": "work", "name": "kid"})
            assert ok, text
            kid = data["id"]
            ok, text, data = await lead.call_tool("roost_spawn", {"task": "more work", "name": "kid"})
            assert not ok and text.startswith(f"error (name_taken): 'kid' is already the name of job {kid} "), text
            assert "(such as 'kid-2')" in text
            with pytest.raises(ProtocolError) as refused:
                await lead.call("spawn", task="op work", name="kid")
            assert refused.value.code == "name_taken"
            taken = cli("start", "cli work", "--name", "kid", "--host", "scripted", expect=1)
            assert taken.stderr.startswith(f"roost: name_taken: 'kid' is already the name of job {kid} "), taken.stderr
            # An empty name is no name (a model may pass "" for an argument it leaves out).
            ok, text, data = await lead.call_tool("roost_spawn", {"task": "kid", "name": ""})
            assert ok and data["name"] == "kid-2", text
            assert sorted(row["name"] for row in cli.json("jobs")) == ["kid", "kid-2"]

    run_async(story)


# ---------------------------------------------------------------------------- point 12

#: Names as users type them: a right-to-left mark, an emoji, a tab.
TYPED = ["\u200ffix", "🚀 launch", "a\tb"]


def test_a_name_is_kept_as_typed_and_found_as_typed_or_framed(cli):
    ids = {}
    for name in TYPED:
        started = start(cli, f"task of {name}", name)
        assert started["name"] == name  # kept, not rewritten
        ids[name] = started["id"]
    rows = {row["id"]: row for row in cli.json("jobs")}
    for name, job in ids.items():
        framed = sanitize(name)
        assert framed != name and rows[job]["name"] == name and rows[job]["framedName"] == framed
        # Every command finds the job by the name as typed, and by its framed form.
        for ref in (name, framed):
            assert cli.json("wait", ref)["id"] == job
            assert cli.json("log", ref)["id"] == job
            assert cli.json("reply", ref, "more")["id"] == job
    # Exact only: a part of a name finds nothing.
    assert cli("log", "launc", expect=1).stderr.startswith("roost: not_found: ")


def test_a_name_clashing_in_either_form_is_taken(cli):
    job = start(cli, "first", "\u200ffix")["id"]
    # Typed differently, framed the same: a lookup by "fix" would find both.
    taken = cli("start", "second", "--name", "fix", "--host", "scripted", expect=1).stderr
    assert taken.startswith(f"roost: name_taken: 'fix' is already the name of job {job} "), taken
    taken = cli("start", "third", "--name", "\u200efix", "--host", "scripted", expect=1).stderr
    assert taken.startswith(f"roost: name_taken: '\\u200efix' is already framed as 'fix', the name of job {job} "), taken


def test_only_an_unusable_name_is_refused(cli):
    for name, why in (("   ", "is blank"), ("a\nb", "holds a line break"), ("a\u2028b", "holds a line break"), ("x" * 201, "longer than 200")):
        refused = cli("start", "task", "--name", name, "--host", "scripted", expect=1).stderr
        assert refused.startswith("roost: bad_args: ") and why in refused, refused
        assert RAW.search(refused.rstrip("\n")) is None, refused
    assert cli.json("jobs") == []


def test_terminals_get_escapes_not_raw_characters(cli, daemon):
    """``roost jobs``, ``start``, ``agents``, ``view --once`` and ``log`` draw a name's
    control, bidi and separator characters as escapes; ``start`` prints a ``$'...'``
    word that names the job when pasted into bash."""
    out = cli("start", "t", "--name", "a\tb", "--host", "scripted", "--scenario", json.dumps(QUIET)).stdout
    job = re.match(r"started job ([0-9a-f]{8}) ", out)[1]
    assert f"started job {job} (a\\tb) on host scripted" in out and "roost log $'a\\tb' --follow" in out, out
    evil = "\u202eevil\u200f"
    scenario = {"run": [{"steps": [{"spawn": {"task": "report", "name": evil, "model": "quick"}}, {"say": "spawned"}]}], "default": {"steps": [{"say": "noted"}]}, "models": {"quick": QUIET}}
    lead = cli.json("start", "lead the way", "--name", "lead", "--host", "scripted", "--scenario", json.dumps(scenario))["id"]
    kid = wait_until(lambda: next((row["id"] for row in cli.json("jobs") if row["name"] == evil), None), what="the kid")
    wait_until(lambda: any(e["details"]["kind"] == "report" for e in agent_items(daemon.entries(lead))), what="the kid's report")
    report = next(e for e in agent_items(daemon.entries(lead)) if e["details"]["kind"] == "report")
    assert report["details"]["fromName"] == evil  # the transcript keeps the name as typed
    assert parse_envelopes(report["content"])[0]["from"] == "evil"  # the envelope frames it
    # The tool's result, which hosts draw on their terminal too, escapes it.
    (spawned,) = tool_results(daemon.entries(lead), "roost_spawn")
    assert spawned.startswith(f"spawned \\u202eevil\\u200f ({kid}); "), spawned
    drawn = {
        "jobs": cli("jobs").stdout,
        "agents": cli("agents").stdout,
        "agents by state": cli("agents", "--group", "state").stdout,
        "view": cli("view", "--once", "--select", evil).stdout,
        "log": cli("log", "lead").stdout,
        "jobs --json": cli("jobs", "--json").stdout,
        "log --json": cli("log", "lead", "--json").stdout,
    }
    for what, text in drawn.items():
        assert RAW.search(text) is None and "\t" not in text, (what, text)
    # --json escapes them as JSON does: the data parses back as typed.
    assert {row["name"] for row in json.loads(drawn["jobs --json"])} == {"a\tb", "lead", evil}
    assert "a\\tb" in drawn["jobs"] and "\\u202eevil\\u200f" in drawn["jobs"]
    assert f"\\u202eevil\\u200f ({kid})" in drawn["agents"] and f"\\u202eevil\\u200f ({kid})" in drawn["view"]
    assert "\\u202eevil\\u200f" in drawn["log"], drawn["log"]


def test_an_agent_reaches_a_child_by_the_name_it_typed_or_the_framed_one(daemon, tmp_path):
    async def story():
        async with session(daemon, tmp_path) as lead:
            ok, text, data = await lead.call_tool("roost_spawn", {"task": "work", "name": "🚀 kid"})
            assert ok and data["name"] == "🚀 kid", text
            kid = data["id"]
            await in_thread(daemon.wait_job, kid)
            for to in ("🚀 kid", "kid"):
                ok, text, data = await send(lead, to, f"hello via {to}")
                assert ok and data["to"] == kid, text

    run_async(story)
