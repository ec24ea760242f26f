"""roost core: identity, the session-file routing key, the one queue, the daemon and workers.

Policy (reach, limits, framing, rendering, tools, hand-back) lives in plugins; a plugin
writes ``from roost_core import hookimpl`` (and ``pure`` for a decision roost may keep).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    # typing alone costs more than this whole package: nothing here needs it at run time.
    from collections.abc import Callable
    from typing import Any, TypeVar

    import pluggy

    hookimpl: pluggy.HookimplMarker
    _Function = TypeVar("_Function", bound=Callable[..., Any])

__version__ = "0.1.0"


def __getattr__(name: str) -> pluggy.HookimplMarker:
    # ``hookimpl`` is made at its first use: what runs on every call of someone else's
    # loop (a hook's relay, ``roost --version``) imports this package and not pluggy.
    if name == "hookimpl":
        import pluggy

        marker = pluggy.HookimplMarker("roost")
        globals()["hookimpl"] = marker
        return marker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: The attribute :func:`pure` sets on a hook implementation (read by ``roost_core.policy``).
PURE_MARK = "roost_pure"


def pure(function: _Function) -> _Function:
    """Declare a hook implementation *pure*: its answer follows from the hook's arguments
    alone (for ``roost_decide_reach``: the two peers, how the target was addressed and the
    config), never from a file, the clock, the network or state the plugin keeps.

    roost may then keep the answer and not ask again while those arguments stay as they
    are (a reach decision is kept until the peer table changes). Without the mark roost
    asks the hook every time (every send, every listing), so a policy that reads the world
    is right at once. A decision is kept only when *every* implementation of the hook is
    marked. Put it on the function (either side of ``@hookimpl``); for a method, on the
    method::

        @hookimpl
        @pure
        def roost_decide_reach(sender, target, addressed_by, config): ...
    """
    setattr(function, PURE_MARK, True)
    return function


def is_pure(function: object) -> bool:
    """Whether ``function`` (a hook implementation's function, or a bound method of one)
    was marked with :func:`pure`."""
    return getattr(function, PURE_MARK, False) is True


__all__ = ["PURE_MARK", "__version__", "hookimpl", "is_pure", "pure"]
