"""repo-reach on a fresh manager: the default reach plus this plugin, nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest
import roost_repo_reach
from roost_repo_reach import find_repository, repository_of, same_repository

from roost_core.records import ReachDecision
from roost_core.testing import daemon_hooks, load_plugin, make_config, make_manager, make_peer


@pytest.fixture(autouse=True)
def fresh_cache():
    roost_repo_reach.clear_cache()
    yield
    roost_repo_reach.clear_cache()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    for sub in ("a/deep/er", "b"):
        (root / sub).mkdir(parents=True)
    return root


@pytest.fixture(params=["default first", "plugin first"])
def pm(request, roost_plugin_manager):
    from roost_plugins import reach

    order = (reach, roost_repo_reach) if request.param == "default first" else (roost_repo_reach, reach)
    return roost_plugin_manager(*order)


def decide(pm, sender, target, addressed_by="name", config=None):
    return pm.hook.roost_decide_reach(sender=sender, target=target, addressed_by=addressed_by, config=config or make_config())


def peer(peer_id: str, name: str, cwd: Path | str | None, **fields):
    return make_peer(id=peer_id, name=name, kind="foreground", session=f"/s/{peer_id}.jsonl", cwd=str(cwd) if cwd else None, **fields)


def test_walks_up_to_the_repository(repo: Path, tmp_path: Path) -> None:
    assert find_repository(str(repo / "a" / "deep" / "er")) == str((repo / ".git").resolve())
    assert find_repository(str(repo)) == find_repository(str(repo / "b"))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert find_repository(str(outside)) in (None, find_repository(str(tmp_path)))
    assert find_repository(None) is None and find_repository("") is None


def test_worktrees_share_a_repository_and_submodules_do_not(repo: Path, tmp_path: Path) -> None:
    common = repo / ".git"
    (common / "worktrees" / "wt").mkdir(parents=True)
    (common / "worktrees" / "wt" / "commondir").write_text("../..\n")
    worktree = tmp_path / "wt"
    worktree.mkdir()
    (worktree / ".git").write_text(f"gitdir: {common / 'worktrees' / 'wt'}\n")
    assert find_repository(str(worktree)) == find_repository(str(repo))

    (common / "modules" / "sub").mkdir(parents=True)
    sub = repo / "sub"
    sub.mkdir()
    (sub / ".git").write_text("gitdir: ../.git/modules/sub\n")
    assert find_repository(str(sub)) == str((common / "modules" / "sub").resolve())
    assert find_repository(str(sub)) != find_repository(str(repo))


def test_symlinked_cwd_is_the_same_repository(repo: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(repo / "a")
    assert same_repository(peer("f0000001", "x", link), peer("f0000002", "y", repo / "b"))


def test_the_cache_forgets_after_a_while(tmp_path: Path) -> None:
    plain = tmp_path / "later"
    plain.mkdir()
    before = repository_of(str(plain), now=100.0)
    (plain / ".git").mkdir()
    assert repository_of(str(plain), now=101.0) == before
    assert repository_of(str(plain), now=100.0 + roost_repo_reach.CACHE_SECONDS) == str((plain / ".git").resolve())


def test_same_repository_different_trees_is_tree_by_name_and_id(pm, repo: Path) -> None:
    alice, bob = peer("f0000001", "alice", repo / "a" / "deep"), peer("f0000002", "bob", repo / "b")
    for addressed_by in ("name", "id", "list"):
        assert decide(pm, alice, bob, addressed_by) == ReachDecision(allowed=True, relation="tree")


def test_without_the_plugin_the_default_refuses(repo: Path, roost_plugin_manager) -> None:
    from roost_plugins import reach

    alice, bob = peer("f0000001", "alice", repo / "a"), peer("f0000002", "bob", repo / "b")
    decision = decide(roost_plugin_manager(reach), alice, bob)
    assert decision.allowed is False and decision.relation == "external"


def test_session_tree_relations_are_kept(pm, repo: Path) -> None:
    lead = peer("f0000001", "lead", repo)
    kid = make_peer(id="c0000001", name="kid", session="/s/kid.jsonl", cwd=str(repo / "b"), parent_session=lead.session, parent_peer=lead.id, root_session=lead.session)
    assert decide(pm, lead, kid) == ReachDecision(allowed=True, relation="child")
    assert decide(pm, kid, lead) == ReachDecision(allowed=True, relation="parent")


def test_other_repositories_stay_external(pm, repo: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    (other / ".git").mkdir(parents=True)
    decision = decide(pm, peer("f0000001", "alice", repo), peer("f0000002", "bob", other))
    assert decision.allowed is False and decision.relation == "external"
    # No cwd (or no repository) on either side is never "the same repository".
    assert decide(pm, peer("f0000001", "alice", None), peer("f0000002", "bob", None)).allowed is False


def test_external_by_id_in_the_same_repository_becomes_tree(pm, repo: Path) -> None:
    config = make_config({"agentExternalMessages": True})
    decision = decide(pm, peer("f0000001", "alice", repo), peer("f0000002", "bob", repo / "b"), "id", config)
    assert decision == ReachDecision(allowed=True, relation="tree")


def test_allow_list_reaches_named_peers_from_anywhere(pm, repo: Path, tmp_path: Path) -> None:
    config = make_config({"repoReachAllow": ["ci-bot"]})
    elsewhere = tmp_path / "x"
    elsewhere.mkdir()
    me = peer("f0000001", "alice", repo)
    bot = peer("f0000002", "ci-bot", elsewhere)
    assert decide(pm, me, bot, "name", config) == ReachDecision(allowed=True, relation="external")
    # Directional: the bot is reachable; it does not reach everyone else by being listed.
    assert decide(pm, bot, me, "name", config).allowed is False
    assert decide(pm, me, peer("f0000003", "ci-bot2", elsewhere), "name", config).allowed is False


@pytest.mark.parametrize("bad", ["ci-bot", {"ci-bot": True}, [1, 2], None])
def test_a_malformed_allow_list_allows_nothing(pm, repo: Path, tmp_path: Path, bad) -> None:
    config = make_config({"repoReachAllow": bad})
    bot = peer("f0000002", "ci-bot", tmp_path)
    assert decide(pm, peer("f0000001", "alice", repo), bot, "name", config).allowed is False


def test_alone_it_still_decides_the_repository(repo: Path, roost_plugin_manager) -> None:
    pm = roost_plugin_manager(roost_repo_reach)
    assert decide(pm, peer("f0000001", "a", repo), peer("f0000002", "b", repo / "b")).relation == "tree"
    assert decide(pm, peer("f0000001", "a", repo), peer("f0000002", "b", None)) is None


def test_wins_over_the_default_on_the_real_manager(repo: Path) -> None:
    pm = make_manager(roost_repo_reach, defaults=True)
    assert decide(pm, peer("f0000001", "a", repo), peer("f0000002", "b", repo / "b")).relation == "tree"


def test_the_installed_entry_point_is_this_module() -> None:
    assert load_plugin("repo-reach") is roost_repo_reach


def test_it_is_not_marked_pure_so_the_daemon_asks_it_at_every_send(repo: Path, tmp_path: Path) -> None:
    """It reads the file system: the daemon keeps none of its decisions, so a directory
    that becomes a repository counts (once the plugin's own cache forgets), with no
    change to the peer table."""
    hooks = daemon_hooks(make_manager(roost_repo_reach, defaults=True))
    assert hooks.reach_pure is False
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    alice, bob = peer("f0000001", "alice", repo / "a"), peer("f0000002", "bob", elsewhere)
    assert hooks.decide_reach(alice, bob, "id", make_config()).relation == "external"
    (elsewhere / ".git").symlink_to(repo / ".git")  # bob's directory joins alice's repository
    roost_repo_reach.clear_cache()
    assert hooks.decide_reach(alice, bob, "id", make_config()) == ReachDecision(allowed=True, relation="tree")
