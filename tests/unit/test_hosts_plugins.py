"""Hosts are plugins: the core knows a host only from ``roost_register_hosts``.

roost's own hosts (``scripted``, ``shell``, ``pi``, ``claude``) are default plugins of
those names; with them blocked the core has no host at all. The modules that serve every
host (the CLI, the view, transcript reading, the worker, the daemon's tools) name none:
no host's name as a value, no import of a host's package. The source is read with
``ast``, so docstrings and comments may still say which agents roost ships with.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from roost_core import hookimpl
from roost_core.hosts import registered_hosts, session_seqs, transcript_reader
from roost_core.plugins import make_plugin_manager
from roost_core.records import HostSpec
from roost_core.testing import make_manager
from roost_core.transcript import parse_entries
from roost_plugins.hosts import claude

SRC = Path(__file__).resolve().parents[2] / "src"
OWN_HOSTS = ("scripted", "shell", "pi", "claude", "codex", "qwen", "opencode", "gemini")
#: The modules every host goes through.
SHARED = (
    "roost_core/cli.py",
    "roost_core/cli_support.py",
    "roost_core/view.py",
    "roost_core/transcript.py",
    "roost_core/policy.py",
    "roost_core/worker/main.py",
    "roost_core/daemon/tools.py",
    # Which host a job gets when none is named, and which hosts have warm workers, are
    # the hosts' own word (HostSpec.default_agent, stand_in, warm_pool).
    "roost_core/daemon/jobmaker.py",
    "roost_core/daemon/ops_messaging.py",
    "roost_core/daemon/pool.py",
    "roost_core/daemon/workers.py",
    "roost_core/daemon/hostset.py",
)
#: The packages that belong to one host.
HOST_PACKAGES = ("roost_plugins.claude", "roost_plugins.pi", "roost_plugins.pi.host", "roost_core.hosts.shell", "roost_core.hosts.scripted", "roost_plugins.hosts", "roost_plugins.codex", "roost_plugins.qwen", "roost_plugins.opencode")
#: The one host-specific import left in a shared module: ``roost start --scenario`` is
#: parsed where the user's files are, by the scripted host's scenario loader.
ALLOWED_IMPORTS = {("roost_core/cli.py", "roost_core.hosts.scripted", "load_scenario")}


def host_mentions(path: str, src: Path = SRC) -> list[str]:
    """Each place ``path`` names a host: a string value that is a host's name, an import
    of a host's package. Docstrings, and the names given to ``add_argument`` (``roost
    completion SHELL``), are not values."""
    tree = ast.parse((src / path).read_text())
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    docstrings |= {
        id(node.args[0])
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument" and node.args
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in OWN_HOSTS and id(node) not in docstrings:
            found.append(f"{path}:{node.lineno}: the string {node.value!r}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                modules = {node.module, f"{node.module}.{alias.name}"}
                if any(m == p or m.startswith(p + ".") for m in modules for p in HOST_PACKAGES) and (path, node.module, alias.name) not in ALLOWED_IMPORTS:
                    found.append(f"{path}:{node.lineno}: from {node.module} import {alias.name}")
        elif isinstance(node, ast.Import):
            found.extend(f"{path}:{node.lineno}: import {alias.name}" for alias in node.names if alias.name.startswith(HOST_PACKAGES))
    return found


@pytest.mark.parametrize("path", SHARED)
def test_no_shared_module_names_a_host(path: str) -> None:
    assert host_mentions(path) == []


def test_the_check_sees_a_host_named(tmp_path) -> None:
    # The check itself: the old special case (transcript.py naming Claude) is found.
    fake = tmp_path / "roost_core"
    fake.mkdir()
    (fake / "transcript.py").write_text('"""pi, claude."""\nfrom roost_plugins.claude.transcript import entries_of\nif host == "claude":\n    pass\n')
    assert host_mentions("roost_core/transcript.py", tmp_path) == [
        "roost_core/transcript.py:2: from roost_plugins.claude.transcript import entries_of",
        "roost_core/transcript.py:3: the string 'claude'",
    ]


def test_roosts_own_hosts_come_from_their_plugins_only() -> None:
    pm = make_plugin_manager(autoload=False)
    assert list(registered_hosts(pm)) == list(OWN_HOSTS)
    assert registered_hosts(make_plugin_manager(disabled=OWN_HOSTS, autoload=False)) == {}
    without_pi = registered_hosts(make_plugin_manager(disabled=["pi"], autoload=False))
    assert list(without_pi) == [host for host in OWN_HOSTS if host != "pi"]
    spec = registered_hosts(pm)["claude"]
    assert spec.command is not None and spec.transcript_entries is claude.transcript_entries
    assert registered_hosts(pm)["pi"].command is not None and registered_hosts(pm)["pi"].transcript_entries is None


class TeamPi:
    """A team's own ``pi`` host."""

    spec = HostSpec(name="pi", factory=lambda job, services: None)

    @hookimpl
    def roost_register_hosts(self) -> list[HostSpec]:
        return [self.spec, "not a spec"]  # type: ignore[list-item]


def test_a_name_is_kept_by_its_first_plugin_and_freed_by_blocking_it(caplog) -> None:
    team = TeamPi()
    hosts = registered_hosts(make_manager(("team-pi", team), defaults=True))
    assert hosts["pi"] is not TeamPi.spec  # roost's pi plugin came first
    assert "host 'pi' is registered twice" in caplog.text and "not a HostSpec" in caplog.text
    hosts = registered_hosts(make_manager(("team-pi", team), defaults=True, disabled=["pi"]))
    assert hosts["pi"] is TeamPi.spec


def test_a_transcript_reads_as_its_host_says(tmp_path) -> None:
    pm = make_plugin_manager(autoload=False)
    assert transcript_reader(None) is parse_entries
    assert transcript_reader(registered_hosts(pm)["pi"]) is parse_entries
    assert transcript_reader(registered_hosts(pm)["claude"]) is claude.transcript_entries
    session = tmp_path / "s.jsonl"
    session.write_text('{"type":"message","message":{"role":"user","content":"hi","roost":{"seq":4}}}\n')
    assert session_seqs(registered_hosts(pm)["pi"], str(session)) == {4}
    with pytest.raises(ValueError):
        session_seqs(registered_hosts(pm)["claude"], str(session))  # not a Claude Code transcript's name


def test_the_host_no_one_named_is_the_hosts_own_word(tmp_path) -> None:
    """``roost start`` without a host takes the first default agent that can run here; a
    foreground spawn without one gets the stand-in; warm workers are kept for the hosts
    that ask. A team's host can be any of them, as roost's pi and scripted are."""
    from roost_core.daemon.hostset import HostSet
    from roost_core.protocol import ProtocolError

    class Team:
        @hookimpl
        def roost_register_hosts(self) -> list[HostSpec]:
            return [
                HostSpec(name="broken-agent", factory=None, default_agent=True, unavailable=lambda: "its program is gone"),
                HostSpec(name="team-agent", factory=None, default_agent=True, warm_pool=True),
                HostSpec(name="team-stand-in", factory=None, stand_in=True),
            ]

    hosts = HostSet(make_manager(("team", Team()), defaults=False))
    assert hosts.default_agent(tmp_path / "config.json") == "team-agent"
    assert hosts.stand_in() == "team-stand-in"
    assert hosts.warm_pooled() == {"team-agent"}
    # roost's own: pi offers itself and keeps warm workers, scripted stands in.
    own = HostSet(make_plugin_manager(autoload=False))
    assert own.stand_in() == "scripted" and own.warm_pooled() == {"pi"}
    assert [name for name, spec in own.specs.items() if spec.default_agent] == ["pi"]

    class OnlyBroken:
        @hookimpl
        def roost_register_hosts(self) -> list[HostSpec]:
            return [HostSpec(name="broken-agent", factory=None, default_agent=True, unavailable=lambda: "its program is gone"),
                    HostSpec(name="team-stand-in", factory=None, stand_in=True)]

    with pytest.raises(ProtocolError) as refused:
        HostSet(make_manager(("broken", OnlyBroken()), defaults=False)).default_agent("config.json")
    assert refused.value.code == "no_host"
    assert "(broken-agent: its program is gone)" in refused.value.message and "roost start --host team-stand-in" in refused.value.message
