"""The config home a job's OpenCode runs with (``roost_plugins.opencode.confighome``):
what it links of the user's, what it seeds, and when it is the user's own. The real
OpenCode's side (no install into the user's folder, the user's provider used) is in
``tests/clis/test_opencode_host.py``."""

from __future__ import annotations

import json

from roost_plugins.opencode.confighome import job_config_home, user_config_home
from roost_plugins.opencode.install import plugin_text


def tree(folder):
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else "folder" for p in sorted(folder.rglob("*"))}


def users_home(tmp_path):
    user = tmp_path / "user-config"
    (user / "opencode" / "agents").mkdir(parents=True)
    (user / "opencode" / "opencode.json").write_text('{"model": "mine/model"}')
    (user / "opencode" / "agents" / "review.md").write_text("review")
    (user / "opencode" / "package.json").write_text('{"dependencies": {"left-pad": "1"}}')
    (user / "git").mkdir()
    (user / "git" / "config").write_text("[user]\n")
    return user


def test_the_job_home_links_the_users_entries_and_holds_the_seed_of_its_own(tmp_path):
    user = users_home(tmp_path)
    (user / "opencode" / "plugins").mkdir()
    (user / "opencode" / "plugins" / "roost.js").write_text(plugin_text())  # roost's installed copy
    before = tree(user)
    home = job_config_home(tmp_path / "job" / "config", user)
    assert home == tmp_path / "job" / "config"
    assert (home / "git").resolve() == user / "git"
    folder = home / "opencode"
    assert json.loads((folder / "opencode.json").read_text()) == {"model": "mine/model"}
    assert (folder / "agents").resolve() == user / "opencode" / "agents"
    assert (folder / "plugins").resolve() == user / "opencode" / "plugins"
    # npm's files are the job's: no package.json (the user's lists packages not here),
    # the lock lists the plugin package, node_modules is empty.
    assert not (folder / "package.json").exists()
    assert json.loads((folder / "package-lock.json").read_text())["packages"][""]["dependencies"].keys() == {"@opencode-ai/plugin"}
    assert not (folder / "node_modules").is_symlink() and list((folder / "node_modules").iterdir()) == []
    assert tree(user) == before
    # Made again on the next start, from the user's folder as it is then.
    (user / "opencode" / "AGENTS.md").write_text("be brief")
    assert job_config_home(home, user) == home and (folder / "AGENTS.md").read_text() == "be brief"


def test_a_users_own_plugin_or_tool_keeps_the_users_config_home(tmp_path):
    for code in ("plugins/mine.ts", "tools/lookup.ts", "plugin/old.js"):
        user = users_home(tmp_path / code.replace("/", "-"))
        (user / "opencode" / code).parent.mkdir()
        (user / "opencode" / code).write_text('import { tool } from "@opencode-ai/plugin"')
        assert job_config_home(tmp_path / code.replace("/", "-") / "job", user) is None
        assert not (tmp_path / code.replace("/", "-") / "job").exists()


def test_the_users_config_home_is_xdg_config_home_else_dot_config():
    assert user_config_home({"XDG_CONFIG_HOME": "/x/cfg", "HOME": "/h"}) == user_config_home({"XDG_CONFIG_HOME": "/x/cfg"})
    assert str(user_config_home({"XDG_CONFIG_HOME": "/x/cfg"})) == "/x/cfg"
    assert str(user_config_home({"HOME": "/h"})) == "/h/.config"
