"""The core names no host (issue 50): no module under ``src/roost_core`` imports a host's
package (``roost_plugins.<host>``) or names a host in its code (a string value, a name, an
attribute, a function, an argument), the config keys (``config.py``) and the MCP server
(``mcp/``) included. A host is its plugin's: what the core knows of it is what
``roost_register_hosts`` says. Docstrings, comments and text for people (``help=``, log
lines) may still name the agents roost ships with as examples.

The source is read with ``ast``, so nothing is imported. :data:`NOT_YET` lists the places
still to move, each with what it is; the test fails on a new one, and on one that is gone
(take it off the list, so that it cannot come back).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
#: A host's name inside a word: ``claude_session_id``, ``ROOST_CLAUDE_BIN``, ``.pi``.
HOST = re.compile(r"(?i)claude|codex|gemini|opencode|qwen|(?<![a-z])pi(?![a-z])")
#: Logger methods: their arguments are text for people.
LOG_CALLS = {"debug", "info", "warning", "error", "exception", "critical"}

#: (module, what it names) still to move out of the core.
NOT_YET: dict[tuple[str, str], str] = {
    # Claude Code's foreground session (its transcript, its session id, its variables) is
    # found by the MCP server itself: to move behind the host spec.
    ("roost_core/mcp/peer.py", "import roost_plugins.claude"): "Claude Code's config folder",
    ("roost_core/mcp/peer.py", "import roost_plugins.claude.transcript"): "Claude Code's transcript reader",
    ("roost_core/mcp/peer.py", "def find_claude_transcript"): "Claude Code's transcript",
    ("roost_core/mcp/peer.py", "def claude_session"): "Claude Code's session",
    ("roost_core/mcp/peer.py", "arg claude"): "Claude Code's session",
    ("roost_core/mcp/peer.py", "arg claude_session_id"): "Claude Code's session",
    ("roost_core/mcp/peer.py", "attr claude"): "Claude Code's session",
    ("roost_core/mcp/peer.py", "attr claude_session"): "Claude Code's session",
    ("roost_core/mcp/peer.py", "attr claude_session_id"): "Claude Code's session",
    ("roost_core/mcp/peer.py", "name claude"): "Claude Code's session",
    ("roost_core/mcp/peer.py", "name claude_session_id"): "Claude Code's session",
    ("roost_core/mcp/peer.py", "name find_claude_transcript"): "Claude Code's transcript",
    ("roost_core/mcp/peer.py", "'claude'"): "the host a foreground Claude Code's children get",
    ("roost_core/mcp/server.py", "name claude"): "Claude Code's session",
    ("roost_core/mcp/server.py", "name claude_session_id"): "Claude Code's session",
    ("roost_core/mcp/server.py", "kw claude"): "Claude Code's session",
    ("roost_core/mcp/server.py", "kw claude_session_id"): "Claude Code's session",
    ("roost_core/mcp/server.py", "'CLAUDE_PROJECT_DIR'"): "Claude Code's working directory",
    ("roost_core/mcp/server.py", "'CLAUDE_CODE_SESSION_ID'"): "Claude Code's session",
    ("roost_core/mcp/server.py", "'CLAUDECODE'"): "Claude Code's session",
    # Claude Code's own config key, validated by the core.
    ("roost_core/config.py", "'claudePermissionPrompts'"): "Claude Code's config key",
    ("roost_core/config.py", "'claudePermissionPrompts must be \"ask\" or \"none\"'"): "Claude Code's config key",
    ("roost_core/config.py", "'claude_permission_prompts'"): "Claude Code's config key",
    ("roost_core/config.py", "name claude_permission_prompts"): "Claude Code's config key",
    # The warm pool is pi's (HostSpec.warm_pool) but its config keys are named after it.
    ("roost_core/config.py", "name MAX_PI_POOL_SIZE"): "the warm pool's config",
    ("roost_core/config.py", "name pi_pool"): "the warm pool's config",
    ("roost_core/config.py", "name pi_pool_size"): "the warm pool's config",
    ("roost_core/config.py", "name pi_pool_max"): "the warm pool's config",
    ("roost_core/config.py", "'pi_pool'"): "the warm pool's config",
    ("roost_core/config.py", "'pi_pool_size'"): "the warm pool's config",
    ("roost_core/config.py", "'pi_pool_max'"): "the warm pool's config",
    ("roost_core/daemon/liveconfig.py", "kw pi_pool"): "the warm pool's config",
    ("roost_core/daemon/liveconfig.py", "attr pi_pool"): "the warm pool's config",
    ("roost_core/daemon/liveconfig.py", "kw pi_pool_size"): "the warm pool's config",
    ("roost_core/daemon/liveconfig.py", "kw pi_pool_max"): "the warm pool's config",
    ("roost_core/daemon/liveconfig.py", "attr pi_pool_size"): "the warm pool's config",
    ("roost_core/daemon/liveconfig.py", "attr pi_pool_max"): "the warm pool's config",
    ("roost_core/daemon/workers.py", "\"no warm pi was free for this job's cwd, model and thinking level\""): "a job log's line (tests/pi/test_pi_wake.py reads it)",
    ("roost_core/daemon/workers.py", "attr pi_pool"): "the warm pool's config",
    ("roost_core/daemon/workers.py", "attr pi_pool_size"): "the warm pool's config",
    ("roost_core/daemon/workers.py", "attr pi_pool_max"): "the warm pool's config",
    # pi's own folder: the project config's second home (.pi/roost.toml).
    ("roost_core/config.py", "'.pi'"): "a project's .pi/roost.toml",
    ("roost_core/paths.py", "'.pi'"): "pi's agent folder",
    ("roost_core/paths.py", "'PI_CODING_AGENT_DIR'"): "pi's agent folder",
    # The worker's job token variable, named after the first host.
    ("roost_core/daemon/workers.py", "kw PI_JOB_TOKEN"): "the job token's variable",
    ("roost_core/hosts/process.py", "'PI_JOB_TOKEN'"): "the job token's variable",
    ("roost_core/worker/main.py", "'PI_JOB_TOKEN'"): "the job token's variable",
    # roost's own session format is pi's: these custom types are in every session file.
    ("roost_core/records.py", "'pi-roost-agent-message'"): "a session file's entry type",
    ("roost_core/transcript.py", "'pi-roost-seq'"): "a session file's entry type",
    # The hook relay: Claude Code's pid variable, and the table of hosts' hook commands.
    ("roost_core/hookrelay.py", "'CLAUDE_PID'"): "Claude Code's pid",
    ("roost_core/launch.py", "'claude'"): "the hook relays' table",
    ("roost_core/launch.py", "'codex'"): "the hook relays' table",
    ("roost_core/launch.py", "'qwen'"): "the hook relays' table",
    ("roost_core/launch.py", "'opencode'"): "the hook relays' table",
    ("roost_core/launch.py", "'gemini'"): "the hook relays' table",
    ("roost_core/launch.py", "'roost_plugins.gemini.hook:main'"): "the hook relays' table",
    # The default plugins' table (entry-point names), hosts among them.
    ("roost_core/plugins.py", "'pi'"): "a default plugin's name",
    ("roost_core/plugins.py", "'claude'"): "a default plugin's name",
    ("roost_core/plugins.py", "'codex'"): "a default plugin's name",
    ("roost_core/plugins.py", "'qwen'"): "a default plugin's name",
    ("roost_core/plugins.py", "'opencode'"): "a default plugin's name",
    ("roost_core/plugins.py", "'gemini'"): "a default plugin's name",
    ("roost_core/plugins.py", "'roost_plugins.hosts.pi'"): "a default plugin's module",
    ("roost_core/plugins.py", "'roost_plugins.hosts.claude'"): "a default plugin's module",
    ("roost_core/plugins.py", "'roost_plugins.hosts.codex'"): "a default plugin's module",
    ("roost_core/plugins.py", "'roost_plugins.hosts.qwen'"): "a default plugin's module",
    ("roost_core/plugins.py", "'roost_plugins.hosts.opencode'"): "a default plugin's module",
    ("roost_core/plugins.py", "'roost_plugins.hosts.gemini'"): "a default plugin's module",
}


def host_mentions(path: Path, src: Path = SRC) -> list[tuple[str, str, int]]:
    """Each place the module at ``path`` names a host in its code: ``(module, what,
    line)``; docstrings, ``help=`` values and log lines' arguments are left out."""
    tree = ast.parse(path.read_text(), filename=str(path))
    text = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "help":
            text |= {id(part) for part in ast.walk(node.value)}
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in LOG_CALLS:
            text |= {id(part) for arg in node.args for part in ast.walk(arg)}
    module = path.relative_to(src).as_posix()
    found = []
    for node in ast.walk(tree):
        what = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in text and HOST.search(node.value):
            what = repr(node.value)
        elif isinstance(node, ast.Name) and HOST.search(node.id):
            what = f"name {node.id}"
        elif isinstance(node, ast.Attribute) and HOST.search(node.attr):
            what = f"attr {node.attr}"
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and HOST.search(node.name):
            what = f"def {node.name}"
        elif isinstance(node, ast.arg) and HOST.search(node.arg):
            what = f"arg {node.arg}"
        elif isinstance(node, ast.keyword) and node.arg and HOST.search(node.arg):
            what = f"kw {node.arg}"
        elif isinstance(node, ast.Import):
            found.extend((module, f"import {alias.name}", node.lineno) for alias in node.names if HOST.search(alias.name))
        elif isinstance(node, ast.ImportFrom) and node.module and HOST.search(node.module):
            what = f"import {node.module}"
        if what is not None:
            found.append((module, what, node.lineno))
    return found


def core_mentions(src: Path = SRC) -> list[tuple[str, str, int]]:
    return [found for path in sorted((src / "roost_core").rglob("*.py")) for found in host_mentions(path, src)]


def test_no_core_module_names_a_host_but_those_still_to_move() -> None:
    found = core_mentions()
    new = [f"{module}:{line}: {what}" for module, what, line in found if (module, what) not in NOT_YET]
    assert new == [], "a core module names a host (it belongs to the host's plugin):\n" + "\n".join(new)
    gone = sorted(set(NOT_YET) - {(module, what) for module, what, _line in found})
    assert gone == [], f"no longer in the core: take these off NOT_YET: {gone}"


def test_the_config_keys_and_the_mcp_server_are_checked(tmp_path) -> None:
    # A config key or an MCP server's branch named after a host is found there too.
    for module in ("config.py", "mcp/server.py"):
        path = tmp_path / "roost_core" / module
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('KEYS = {"codexSandbox": str}\nif os.environ.get("GEMINI_CLI"):\n    pass\n')
    assert sorted((module, what) for module, what, _line in core_mentions(tmp_path)) == [
        ("roost_core/config.py", "'GEMINI_CLI'"),
        ("roost_core/config.py", "'codexSandbox'"),
        ("roost_core/mcp/server.py", "'GEMINI_CLI'"),
        ("roost_core/mcp/server.py", "'codexSandbox'"),
    ]


def test_the_check_sees_a_host_named(tmp_path) -> None:
    fake = tmp_path / "roost_core"
    fake.mkdir()
    (fake / "bad.py").write_text(
        '"""pi and claude, as examples."""\n'
        "import roost_plugins.codex\n"
        "from roost_plugins.gemini.host import GeminiHost\n"
        'if host == "qwen":\n'
        "    opencode_port = 1\n"
        'parser.add_argument("--x", help="like pi")\n'
        'log.info("no pi was free")\n'
        "def find_claude(): pass\n"
    )
    assert sorted(((what, line) for _module, what, line in host_mentions(fake / "bad.py", tmp_path)), key=lambda found: found[1]) == [
        ("import roost_plugins.codex", 2),
        ("import roost_plugins.gemini.host", 3),
        ("'qwen'", 4),
        ("name opencode_port", 5),
        ("def find_claude", 8),
    ]
