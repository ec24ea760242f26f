"""Name a host plugin's pieces without importing them: a host's plugin module is loaded by
every ``roost`` command, while the code behind it (the host a worker runs, its transcript
reader, its install command) is wanted by few; each piece is imported on its first call."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any

from roost_core.records import HostCommand


def lazy(target: str) -> Callable[..., Any]:
    """A function that calls ``target`` (``"package.module:name"``) with its arguments,
    importing the module when it is first called."""
    module, _, name = target.partition(":")

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"Call :func:`{module}.{name}` (imported on the first call)."
    call.lazy_target = target  # type: ignore[attr-defined]  # what tests check resolves
    return call


def resolve(target: str) -> Any:
    """What ``target`` (``"package.module:name"``) names, imported now: a check that a
    lazy name is not misspelt."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def host_factory(target: str) -> Callable[[Any, Any], Any]:
    """A :class:`~roost_core.records.HostSpec` factory that makes ``target``'s class
    (``"package.module:Class"``, imported in the worker only) with no arguments."""
    make = lazy(target)

    def factory(job: Any, services: Any) -> Any:
        return make()

    factory.lazy_target = target  # type: ignore[attr-defined]
    return factory


def lazy_command(module: str, help: str) -> HostCommand:
    """A host's ``roost NAME ...`` command whose ``add_arguments`` and ``run`` are those of
    ``module``, imported when the command is used."""
    add_arguments: Callable[[argparse.ArgumentParser], None] = lazy(f"{module}:add_arguments")
    run: Callable[[argparse.Namespace], int] = lazy(f"{module}:run")
    return HostCommand(help=help, add_arguments=add_arguments, run=run)
