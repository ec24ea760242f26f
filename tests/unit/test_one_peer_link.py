"""Every client that registers with the daemon (a foreground session, the MCP peer, a job's
worker) keeps its link through one class, ``roost_core.peerlink.PeerLink``: the connect and
backoff loop and the ack are written once in Python, and the pi extension writes its ack
once in TypeScript. Read from the source, as the import-layer test reads imports."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "roost_core"


def calls_in(path: Path) -> list[tuple[str, str | None]]:
    """``(method, first string argument)`` of every method call in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            first = node.args[0] if node.args else None
            found.append((node.func.attr, first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None))
    return found


def places(predicate) -> list[str]:
    return sorted(str(path.relative_to(SRC)) for path in SRC.rglob("*.py") if any(predicate(method, arg) for method, arg in calls_in(path)))


def test_the_ack_is_sent_from_the_peer_link_only():
    assert places(lambda method, arg: method in ("call", "notify") and arg == "ack") == ["peerlink.py"]


def test_only_the_peer_link_keeps_a_registered_connection():
    """A connection that registers (``peer_register``, ``worker_hello``) is opened by the
    link; the only other long-lived connections are the watches of ``roost view`` and
    ``roost web``, which register nothing."""
    opened = sorted(str(path.relative_to(SRC)) for path in SRC.rglob("*.py") if "AsyncClient.open(" in path.read_text())
    assert opened == ["peerlink.py", "view.py", "web/server.py"]
    assert places(lambda method, arg: method == "call" and arg in ("peer_register", "worker_hello")) == ["peerlink.py", "worker/main.py"]


def test_the_pi_extension_sends_its_ack_in_one_place():
    source = (SRC.parent / "roost_plugins" / "pi" / "roost-extension.ts").read_text()
    assert len(re.findall(r"""notify\(\s*["']ack["']""", source)) == 1
