"""One counter of changes to what the daemon's peer table is built from.

The collapsed peer table (``routing.collapse`` of every job and foreground peer) is read by
every ``peers`` listing, every ``send`` and every report route, and changes far less often
than it is read. The daemon keeps it built and builds it again only when this counter has
moved since. The records it is made from are :class:`NotesChanges`: setting a field a
table shows calls :func:`changed`, so no code path can change one and forget to say so;
adding or removing a record calls :func:`changed` by hand.

The counter is process-wide, not per daemon: a change anywhere only makes a table be built
again sooner than needed, never kept when it is stale.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from types import MemberDescriptorType
from typing import Any, ClassVar, Generic, TypeVar

_generation = 0


def changed() -> None:
    """Note a change."""
    global _generation
    _generation += 1


class NotesChanges:
    """The base of a record the peer tables are made from: setting one of its fields in
    ``shown`` (what a table shows) notes a change, and forgets the record's
    ``kept_info`` (its :class:`~roost_core.records.PeerInfo` as last made from those
    fields, which a subclass keeps in that slot), so that a table built again makes
    anew only the entries of the records that moved.

    Each shown field of a slotted subclass (attrs' ``define``) becomes a property over its
    slot whose setter notes the change; every other field keeps its slot as it is. (Not a
    ``__setattr__``, nor attrs' ``on_setattr`` hooks: with them every other field's set,
    such as a seq or a time moved per message, ran Python code too.)"""

    __slots__ = ()
    shown: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # attrs makes the slotted class anew: this runs for it too, and only it has slots.
        for name in cls.shown:
            slot = cls.__dict__.get(name)
            if isinstance(slot, MemberDescriptorType):
                setattr(cls, name, _noting(slot))


def _noting(slot: MemberDescriptorType) -> property:
    """A property over ``slot``: read as the slot is (in C); a set notes a change."""

    def note(record: Any, value: Any) -> None:
        changed()
        slot.__set__(record, value)
        record.kept_info = None

    return property(slot.__get__, note, doc=slot.__doc__)


def generation() -> int:
    """How many changes so far; a table built at another generation is stale."""
    return _generation


Key = TypeVar("Key", bound=Hashable)
Value = TypeVar("Value")


class KeptUntilChange(Generic[Key, Value]):
    """Values worked out from the peer table, kept until the next change (or until
    ``limit`` are kept, then all are worked out again)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._values: dict[Key, Value] = {}
        self._generation = -1

    def get(self, key: Key, make: Callable[..., Value], *args: Any) -> Value:
        """The value kept for ``key``, or ``make(*args)`` kept for it (the arguments
        passed, not a closure, so that a value found costs no allocation)."""
        if _generation != self._generation or len(self._values) >= self.limit:
            self._values = {}
            self._generation = _generation
        value = self._values.get(key)
        if value is None:
            value = self._values[key] = make(*args)
        return value
