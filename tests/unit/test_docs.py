"""docs/plugins.md and docs/protocol.md never drift from the code: every hook (with its
exact signature and kind) and every op (with each field, its type, whether it is
required, its limit, who may call it, its result fields) and every pushed event is
documented, and nothing is documented that does not exist.

When you add a hook, an op, a field or an event, this fails until the doc says so.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from roost_core import hookspecs, protocol
from roost_core.daemon.agentrows import AgentRows
from roost_core.daemon.core import Daemon
from roost_core.daemon.dispatch import Route
from roost_core.daemon.jobs import Job
from roost_core.daemon.optable import OPS
from roost_core.daemon.tables import PeerTables

ROOT = Path(__file__).resolve().parents[2]
PLUGINS_DOC = ROOT / "docs" / "plugins.md"
PROTOCOL_DOC = ROOT / "docs" / "protocol.md"
SRC = ROOT / "src" / "roost_core"

#: ``roost_*`` words in plugins.md that are not hooks (packages, tools, the fixture).
NOT_HOOKS = {"roost_core", "roost_plugins", "roost_agents", "roost_send", "roost_spawn", "roost_peek", "roost_plugin_manager"}


# --------------------------------------------------------------------------- parsing


def section(text: str, title: str) -> str:
    """The body of the ``## title`` section."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"no '## {title}' section"
    return match[1]


def subsections(text: str) -> dict[str, str]:
    """``### `name` `` headings (in order) -> their bodies."""
    parts = re.split(r"^### (.+)$", text, flags=re.M)
    found: dict[str, str] = {}
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        name = re.fullmatch(r"`([^`]+)`", heading.strip())
        if name:
            assert name[1] not in found, f"{name[1]} documented twice"
            found[name[1]] = body
    return found


def backticked(line: str) -> list[str]:
    return re.findall(r"`([^`]+)`", line)


def table_rows(body: str) -> list[list[str]]:
    """Rows of the markdown tables in ``body`` whose first cell is a `name` (header and
    separator rows are skipped)."""
    rows = []
    for line in body.splitlines():
        if line.startswith("| `"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def bullets_after(body: str, label: str) -> list[str]:
    """The `name` of each ``- `name` — ...`` bullet after the ``**label:**`` line."""
    match = re.search(rf"^\*\*{re.escape(label)}:\*\*\s*\n\n((?:- .*\n?)+)", body, re.M)
    if not match:
        return []
    return [re.match(r"- `([^`]+)`", line)[1] for line in match[1].splitlines() if line.startswith("- ")]


def labelled_line(body: str, label: str) -> str | None:
    match = re.search(rf"^\*\*{re.escape(label)}:\*\*(.*)$", body, re.M)
    return match[1].strip() if match else None


# --------------------------------------------------------------------------- the code side


def hook_specs() -> dict[str, Any]:
    return {name: fn for name, fn in vars(hookspecs).items() if name.startswith("roost_") and inspect.isfunction(fn)}


def signature_line(fn: Any) -> str:
    signature = inspect.signature(fn)
    params = ", ".join(f"{p.name}: {p.annotation}" for p in signature.parameters.values())
    return f"{fn.__name__}({params}) -> {signature.return_annotation}"


def function_ast(fn: Any) -> ast.AST:
    return ast.parse(textwrap.dedent(inspect.getsource(fn)))


def literal_keys(node: ast.Dict) -> set[str]:
    return {key.value for key in node.keys if isinstance(key, ast.Constant) and isinstance(key.value, str)}


def returned_dict_keys(fn: Any) -> set[str] | None:
    """Keys of the dict literals ``fn`` returns; None when it returns anything else."""
    keys: set[str] = set()
    for node in ast.walk(function_ast(fn)):
        if isinstance(node, ast.Return) and node.value is not None:
            if not isinstance(node.value, ast.Dict):
                return None
            keys |= literal_keys(node.value)
    return keys


def largest_dict_keys(fn: Any) -> set[str]:
    dicts = [node for node in ast.walk(function_ast(fn)) if isinstance(node, ast.Dict)]
    return literal_keys(max(dicts, key=lambda node: len(node.keys)))


def pushed_events() -> dict[str, set[str]]:
    """Every ``{"event": "NAME", ...}`` dict literal in the core: NAME -> its other keys."""
    events: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Dict):
                continue
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "event" and isinstance(value, ast.Constant) and isinstance(value.value, str):
                    events.setdefault(value.value, set()).update(literal_keys(node) - {"event"})
    return events


def protocol_codes() -> set[str]:
    return {value for name, value in vars(protocol).items() if name.isupper() and isinstance(value, str) and re.fullmatch(r"[a-z_]+", value)}


def limits_codes() -> set[str]:
    """Every refusal code a default plugin can give (limits, broadcast, watch, budget)."""
    import roost_plugins.broadcast as broadcast
    import roost_plugins.budget as budget
    import roost_plugins.limits as limits
    import roost_plugins.watch as watch

    codes = set()
    for module in (limits, broadcast, watch, budget):
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Refusal" and node.args and isinstance(node.args[0], ast.Constant):
                codes.add(node.args[0].value)
    return codes


# --------------------------------------------------------------------------- plugins.md


@pytest.fixture(scope="module")
def plugins_doc() -> str:
    return PLUGINS_DOC.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def documented_hooks(plugins_doc: str) -> dict[str, str]:
    return subsections(section(plugins_doc, "The hooks"))


def test_every_hook_is_documented_and_nothing_else(documented_hooks) -> None:
    assert set(documented_hooks) == set(hook_specs())


@pytest.mark.parametrize("hook", sorted(hook_specs()))
def test_each_hook_has_its_exact_signature(documented_hooks, hook: str) -> None:
    body = documented_hooks.get(hook, "")
    assert f"```python\n{signature_line(hook_specs()[hook])}\n```" in body, f"{hook}: signature missing or different"


@pytest.mark.parametrize("hook", sorted(hook_specs()))
def test_each_hook_says_whether_it_is_firstresult(documented_hooks, hook: str) -> None:
    body = documented_hooks.get(hook, "")
    firstresult = hook_specs()[hook].roost_spec["firstresult"]
    (line,) = [line for line in body.splitlines() if line.startswith("- firstresult:")]
    if firstresult:
        assert line.startswith("- firstresult: yes") and "first non-None" in line
    else:
        assert line.startswith("- firstresult: no")
    assert "- Called" in body and ("- Return" in body or "The return value is ignored" in body)


def test_no_hook_named_anywhere_in_the_doc_is_missing_from_the_specs(plugins_doc: str) -> None:
    named = set(re.findall(r"\broost_[a-z][a-z_]*\b", plugins_doc))
    assert named - NOT_HOOKS <= set(hook_specs())


# --------------------------------------------------------------------------- protocol.md


@pytest.fixture(scope="module")
def protocol_doc() -> str:
    return PROTOCOL_DOC.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def documented_ops(protocol_doc: str) -> dict[str, str]:
    return subsections(section(protocol_doc, "Ops"))


def test_every_op_is_documented_and_nothing_else(documented_ops) -> None:
    assert list(documented_ops) == list(OPS), "document every op of OPS, in its order, and no other"


@pytest.mark.parametrize("op", list(OPS))
def test_each_op_documents_who_may_call_it(documented_ops, op: str) -> None:
    who = labelled_line(documented_ops.get(op, ""), "Who")
    assert who is not None and backticked(who) == [OPS[op].who]


@pytest.mark.parametrize("op", list(OPS))
def test_each_op_documents_every_field_with_type_required_and_limit(documented_ops, op: str) -> None:
    body = documented_ops.get(op, "")
    rows = {row[0].strip("`"): row[1:] for row in table_rows(body)}
    schema = OPS[op].schema
    if not schema:
        assert labelled_line(body, "Fields") == "none" and not rows
        return
    assert list(rows) == list(schema), f"{op}: fields differ"
    for name, field in schema.items():
        type_name, required, limit = rows[name]
        assert type_name == protocol._type_name(field.type), f"{op}.{name}: type"
        assert required == ("yes" if field.required else "no"), f"{op}.{name}: required"
        expected = str(field.max_len) if field.max_len is not None else "-"
        if field.max_bytes is not None:
            expected += f" ({field.max_bytes} bytes)"
        assert limit == expected, f"{op}.{name}: max"


@pytest.fixture(scope="module")
def routes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Route]:
    """The daemon's table of routes (each op's handler), as a daemon on a throwaway home
    builds it."""
    from roost_core.paths import resolve_paths
    from roost_core.plugins import make_plugin_manager
    from roost_core.testing import make_config

    paths = resolve_paths({"ROOST_HOME": str(tmp_path_factory.mktemp("home"))})
    paths.ensure()
    config = make_config({})
    return Daemon(paths, config, make_plugin_manager(config), durable=False).dispatcher.routes


@pytest.mark.parametrize("op", list(OPS))
def test_each_op_documents_its_result_fields(documented_ops, routes, op: str) -> None:
    documented = bullets_after(documented_ops.get(op, ""), "Result")
    assert documented, f"{op}: no **Result:** list"
    returned = returned_dict_keys(routes[op].handle)
    if returned is not None:  # the handler returns dict literals: the doc names exactly their keys
        assert set(documented) == returned, f"{op}: result fields differ"


@pytest.mark.parametrize("op", list(OPS))
def test_each_op_lists_only_real_error_codes(documented_ops, op: str) -> None:
    errors = labelled_line(documented_ops.get(op, ""), "Errors")
    assert errors is not None, f"{op}: no **Errors:** line"
    codes = backticked(re.sub(r"\([^)]*\)", "", errors))  # explanations in parentheses are not codes
    assert errors == "none" or codes
    assert set(codes) <= protocol_codes() | limits_codes()


def test_error_code_tables(protocol_doc: str) -> None:
    body = section(protocol_doc, "Error codes")
    tables = body.split("\n\n")
    documented = [row[0].strip("`") for row in table_rows(body)]
    core = [row[0].strip("`") for table in tables for row in table_rows(table) if len(row) == 2]
    refusals = [row[0].strip("`") for table in tables for row in table_rows(table) if len(row) == 3]
    assert set(core) == protocol_codes()
    assert set(refusals) >= limits_codes() - protocol_codes()  # a plugin may refuse with a core code too
    assert len(documented) == len(set(documented))


def test_every_pushed_event_is_documented_with_its_fields(protocol_doc: str) -> None:
    documented = subsections(section(protocol_doc, "Events"))
    events = pushed_events()
    assert set(documented) == set(events)
    for name, keys in events.items():
        body = documented[name]
        assert {row[0].strip("`") for row in table_rows(body)} == keys, f"event {name}: fields differ"
        assert labelled_line(body, "Sent to") and labelled_line(body, "Errors"), f"event {name}"


def test_the_rows_list_every_field(protocol_doc: str) -> None:
    from roost_core.daemon.receipts import Receipt

    rows = subsections(section(protocol_doc, "Rows").replace("### Job row", "### `job`").replace("### Agent row", "### `agent`").replace("### Peer row", "### `peer`").replace("### Receipt", "### `receipt`"))
    expected = {
        "job": largest_dict_keys(Job.row) | {"parent"},  # op_jobs adds the live parent
        "agent": largest_dict_keys(AgentRows.rows),
        "peer": largest_dict_keys(PeerTables.peer_row),
        "receipt": largest_dict_keys(Receipt.to_json),
    }
    for name, keys in expected.items():
        assert {row[0].strip("`") for row in table_rows(rows[name])} == keys, f"{name} row fields differ"


def test_readme_links_both_docs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(docs/plugins.md)" in readme and "(docs/protocol.md)" in readme
