"""repo-reach in a real daemon: two foreground sessions in one git repository, in two
different session trees. The default reach refuses; with repo-reach they talk as one
tree; blocking it by name (env or ``--disable-plugin``) brings the default back.

Runs from the roost checkout (``scripts/test.sh``): the daemon fixtures come from roost's
``tests/conftest.py``, which is on pytest's ``pythonpath``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BLOCKED_BY_DEFAULT, agent_items, daemon_factory, roost_env, write_config  # noqa: F401 - fixtures
from fg import in_thread, run_async, send

from roost_core.foreground import ForegroundSession
from roost_core.transcript import read_entries
from roost_plugins.envelope import parse_envelopes

QUIET = {"default": {"steps": [{"say": "ok: {input}"}]}}
NAME = "repo-reach"
#: The suite blocks the example plugins by default; these tests unblock this one only.
OTHERS_BLOCKED = ",".join(name for name in BLOCKED_BY_DEFAULT.split(",") if name != NAME)
ENABLED = {"ROOST_DISABLE_PLUGINS": OTHERS_BLOCKED}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "frontend").mkdir()
    (root / "backend" / "api").mkdir(parents=True)
    return root


def fg(daemon, tmp_path: Path, name: str, cwd: Path) -> ForegroundSession:
    return ForegroundSession(tmp_path / f"{name}.jsonl", name=name, paths=daemon.paths, cwd=str(cwd))


def roost_plugins(env: dict[str, str], *flags: str) -> dict:
    result = subprocess.run([sys.executable, "-m", "roost_core.cli", *flags, "plugins", "--json"], env=env, capture_output=True, text=True, timeout=30, check=True)
    return json.loads(result.stdout)


def two_sessions_talk(daemon, tmp_path: Path, repo: Path) -> dict:
    """Alice (frontend) messages Bob (backend/api) by name and by id; what happened."""
    outcome: dict = {}

    async def story():
        async with fg(daemon, tmp_path, "alice", repo / "frontend") as alice, fg(daemon, tmp_path, "bob", repo / "backend" / "api") as bob:
            bob_id = await bob.ensure_registered()
            outcome["by_name"] = await send(alice, "bob", "the API returns 500 on /login")
            outcome["by_id"] = await send(alice, bob_id, "by id")
            _, _, listing = await alice.call_tool("roost_agents", {})
            outcome["listing"] = [(row["name"], row["relation"]) for row in listing["peers"]]
            if outcome["by_name"][0]:
                await bob.wait_for_delivery(2)
                outcome["delivered"] = list(bob.delivered)

    run_async(story)
    outcome["bob_transcript"] = agent_items(read_entries(tmp_path / "bob.jsonl"))
    return outcome


def test_default_reach_refuses_two_trees_in_one_repository(daemon_factory, tmp_path, repo):
    daemon = daemon_factory().start()  # roost_env blocks repo-reach
    outcome = two_sessions_talk(daemon, tmp_path, repo)
    ok, text, _ = outcome["by_name"]
    assert not ok and text.startswith("error (unreachable)") and "agentExternalMessages" in text, text
    ok, text, _ = outcome["by_id"]
    assert not ok and text.startswith("error (unreachable)") and "agentExternalMessages" in text
    assert outcome["listing"] == [] and outcome["bob_transcript"] == []


def test_repo_reach_delivers_as_one_tree(daemon_factory, tmp_path, repo):
    daemon = daemon_factory(**ENABLED).start()
    outcome = two_sessions_talk(daemon, tmp_path, repo)
    ok, text, data = outcome["by_name"]
    assert ok and data["result"] == "delivered" and data["relation"] == "tree", text
    assert text.startswith("delivered to bob (") and text.endswith(f"relation tree); msg {data['id']}"), text
    assert outcome["by_id"][0] and outcome["listing"] == [("bob", "tree")]
    assert [event["relation"] for event in outcome["delivered"]] == ["tree", "tree"]
    # Bob's own session file holds both, framed by the default envelope as relation "tree".
    envelopes = [parse_envelopes(entry["content"])[0] for entry in outcome["bob_transcript"]]
    assert [(e["from"], e["relation"], e["body"]) for e in envelopes] == [
        ("alice", "tree", "the API returns 500 on /login"),
        ("alice", "tree", "by id"),
    ]


def test_another_repository_stays_out_of_reach(daemon_factory, tmp_path, repo):
    other = tmp_path / "other"
    (other / ".git").mkdir(parents=True)
    daemon = daemon_factory(**ENABLED).start()

    async def story():
        async with fg(daemon, tmp_path, "alice", repo) as alice, fg(daemon, tmp_path, "carol", other) as carol:
            await carol.ensure_registered()
            _ok, text, _ = await send(alice, "carol", "hi")
            assert text.startswith("error (unreachable)"), text
            _, _, listing = await alice.call_tool("roost_agents", {})
            assert listing["peers"] == []

    run_async(story)


def test_allow_listed_name_is_reachable_from_outside(daemon_factory, write_config, tmp_path, repo):
    write_config({"repoReachAllow": ["ci-bot"]})
    daemon = daemon_factory(**ENABLED).start()
    outside = tmp_path / "ci"
    outside.mkdir()
    bot = daemon.start_job("watch the build", name="ci-bot", scenario=QUIET, cwd=str(outside))
    stranger = daemon.start_job("other work", name="stranger", scenario=QUIET, cwd=str(outside))
    daemon.wait_job(bot)
    daemon.wait_job(stranger)

    async def story():
        async with fg(daemon, tmp_path, "alice", repo) as alice:
            ok, text, data = await send(alice, "ci-bot", "is main green?")
            assert ok and data["relation"] == "external", text
            ok, text, _ = await send(alice, "stranger", "hi")
            assert text.startswith("error (unreachable)"), text
            await in_thread(daemon.wait_job, bot)

    run_async(story)
    (item,) = agent_items(daemon.entries(bot))
    assert parse_envelopes(item["content"])[0]["relation"] == "external"


@pytest.mark.parametrize("how", ["env", "flag"])
def test_blocking_it_by_name_restores_the_default(daemon_factory, tmp_path, repo, how):
    if how == "env":
        daemon = daemon_factory(ROOST_DISABLE_PLUGINS=",".join(filter(None, [OTHERS_BLOCKED, NAME]))).start()
    else:
        daemon = daemon_factory(**ENABLED).start("--disable-plugin", "repo-reach")
    outcome = two_sessions_talk(daemon, tmp_path, repo)
    assert outcome["by_name"][1].startswith("error (unreachable)")
    assert outcome["by_id"][1].startswith("error (unreachable)")
    assert outcome["bob_transcript"] == []


def test_roost_plugins_shows_it_and_its_distribution(roost_env):
    env = {**roost_env, **ENABLED}
    rows = {row["name"]: row for row in roost_plugins(env)["plugins"]}
    assert rows["repo-reach"] == {"name": "repo-reach", "version": "0.1.0", "source": "roost-repo-reach", "hooks": ["roost_decide_reach"]}
    data = roost_plugins(env, "--disable-plugin", "repo-reach")
    assert "repo-reach" not in {row["name"] for row in data["plugins"]} and "repo-reach" in data["blocked"]
