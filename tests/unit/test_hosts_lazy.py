"""A host plugin names its pieces lazily (:mod:`roost_core.hosts.lazy`): every name each
of roost's own hosts gives resolves, so a misspelt one fails here, not on first use."""

from __future__ import annotations

import pytest

from roost_core.hosts import registered_hosts
from roost_core.hosts.lazy import lazy, resolve
from roost_core.plugins import make_plugin_manager


def lazy_targets() -> list[str]:
    """Every lazy name the registered hosts' specs and commands hold."""
    targets = []
    for spec in registered_hosts(make_plugin_manager(autoload=False)).values():
        parts = [spec.factory, spec.session_file, spec.transcript_entries, spec.transcript_seqs]
        if spec.command is not None:
            parts += [spec.command.add_arguments, spec.command.run]
        targets += [part.lazy_target for part in parts if hasattr(part, "lazy_target")]
    return targets


def test_the_hosts_name_their_pieces_lazily() -> None:
    assert len(lazy_targets()) >= 20


@pytest.mark.parametrize("target", lazy_targets())
def test_every_lazy_name_resolves(target: str) -> None:
    assert callable(resolve(target))


def test_a_lazy_call_imports_and_calls() -> None:
    join = lazy("posixpath:join")
    assert join("a", "b") == "a/b" and join.__name__ == "join"
    with pytest.raises(AttributeError):
        lazy("posixpath:no_such_name")()
