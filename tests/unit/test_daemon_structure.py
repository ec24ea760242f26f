"""The daemon is a set of services (issue 41): read from the source with ``ast``.

No class of the daemon over about 400 lines unless its docstring says why (``Long:``); no
class built of mixins (only records and protocols have bases); no op found by its name
(``getattr`` with a name that is not a literal); and the daemon's table of routes pairs
every op with a method of a service.
"""

from __future__ import annotations

import ast
from pathlib import Path

from roost_core.daemon.optable import OPS

DAEMON = Path(__file__).resolve().parents[2] / "src" / "roost_core" / "daemon"
MOST_LINES = 400
#: Bases a daemon class may have: records, structs, protocols, enums, exceptions, generics.
ALLOWED_BASES = {"NotesChanges", "msgspec.Struct", "Protocol", "enum.Enum", "RuntimeError", "asyncio.Protocol", "ToolServices", "Generic[Key, Value]"}
#: Functions that read attributes by a computed name, and why that is no dispatch.
COMPUTED_GETATTR = {"to_json": "a job record's persisted fields, by their names"}


def classes() -> list[tuple[str, ast.ClassDef]]:
    found = []
    for path in sorted(DAEMON.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found.extend((path.name, node) for node in ast.walk(tree) if isinstance(node, ast.ClassDef))
    return found


def test_no_class_of_the_daemon_is_long_without_a_reason() -> None:
    for name, node in classes():
        lines = (node.end_lineno or node.lineno) - node.lineno + 1
        reason = "Long:" in (ast.get_docstring(node) or "")
        assert lines <= MOST_LINES or reason, f"{name}: class {node.name} has {lines} lines and no reason (Long:) at its top"


def test_no_class_of_the_daemon_is_made_of_mixins() -> None:
    for name, node in classes():
        bases = {ast.unparse(base) for base in node.bases}
        assert bases <= ALLOWED_BASES, f"{name}: class {node.name} is built over {sorted(bases - ALLOWED_BASES)}"


def test_no_op_is_found_by_its_name() -> None:
    for path in sorted(DAEMON.glob("*.py")):
        for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or function.name in COMPUTED_GETATTR:
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
                    assert isinstance(node.args[1], ast.Constant), f"{path.name}:{node.lineno}: getattr with a computed name"


def test_the_routes_pair_every_op_with_a_service_method(tmp_path: Path) -> None:
    from roost_core.daemon.core import Daemon
    from roost_core.paths import resolve_paths
    from roost_core.plugins import make_plugin_manager
    from roost_core.testing import make_config

    paths = resolve_paths({"ROOST_HOME": str(tmp_path)})
    paths.ensure()
    config = make_config({})
    daemon = Daemon(paths, config, make_plugin_manager(config), durable=False)
    routes = daemon.dispatcher.routes
    assert list(routes) == list(OPS)
    services = {daemon.job_ops, daemon.worker_ops, daemon.messaging, daemon.daemon_ops, daemon.handback, daemon.attachments}
    for name, route in routes.items():
        assert route.op is OPS[name]
        for method in (route.handle, route.accept, route.after):
            if method is not None:
                assert getattr(method, "__self__", None) in services, f"{name}: {method!r} is no service's method"
        assert (route.accept is not None) == route.op.accept, name
