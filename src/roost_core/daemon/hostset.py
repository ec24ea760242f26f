"""The hosts the daemon runs jobs on: the plugins' and the built-in ones, by name."""

from __future__ import annotations

from typing import Any

from roost_core.daemon.jobs import Job
from roost_core.hosts import registered_hosts
from roost_core.protocol import BAD_ARGS, NO_HOST, ProtocolError
from roost_core.records import HostSpec


class HostSet:
    """Every host a job can run on, by name: what the plugins register, roost's own
    included."""

    def __init__(self, pm: Any) -> None:
        self.specs: dict[str, HostSpec] = registered_hosts(pm)

    def __contains__(self, name: object) -> bool:
        return name in self.specs

    def get(self, name: str) -> HostSpec | None:
        return self.specs.get(name)

    def check(self, host: str, op: str) -> None:
        """Refuse a new job on ``host`` when no such host is registered (``bad_args``) or
        it cannot run here (``no_host``: its ``unavailable`` says why, e.g. no pi
        installed), before any job is made."""
        spec = self.specs.get(host)
        if spec is None:
            raise ProtocolError(BAD_ARGS, f"{op}: unknown host {host!r} (known: {', '.join(sorted(self.specs))})")
        why = spec.unavailable() if spec.unavailable is not None else None
        if why:
            raise ProtocolError(NO_HOST, f"{op}: host {host!r} cannot run here: {why}")

    def scenario(self, host: str, given: Any, cwd: str, parent: tuple[Any, str | None] | None) -> Any:
        """The scenario a new job on ``host`` runs: its host's choice
        (:attr:`HostSpec.scenario`, refused ``bad_args`` when it cannot be played), or
        ``given`` for a host that takes none."""
        spec = self.specs.get(host)
        if spec is None or spec.scenario is None:
            return given
        try:
            return spec.scenario(given, cwd, parent)
        except ValueError as exc:
            raise ProtocolError(BAD_ARGS, f"scenario: {exc}") from exc

    def default_agent(self, config_file: object) -> str:
        """The host of a ``start`` that names none, with no ``defaultHost``: the first
        registered host that offers itself (:attr:`HostSpec.default_agent`) and can run
        here. Else ``no_host``, saying why each cannot and naming the stand-in: a user who
        asked for an agent must never get the stand-in without naming it."""
        why = []
        for spec in self.specs.values():
            if spec.default_agent:
                reason = spec.unavailable() if spec.unavailable is not None else None
                if not reason:
                    return spec.name
                why.append(f"{spec.name}: {reason}")
        stand_in = self.stand_in()
        hint = f", or start it with host '{stand_in}' (roost start --host {stand_in}) to run without a model" if stand_in else ""
        raise ProtocolError(
            NO_HOST,
            f"no host for this job: no defaultHost in {config_file}, and no default agent can run here "
            f"({'; '.join(why) or 'no host plugin offers one'}). Install it, set defaultHost{hint}.",
        )

    def stand_in(self) -> str | None:
        """The host a session with no host of its own spawns on when no ``defaultHost``
        is set (:attr:`HostSpec.stand_in`), or None."""
        return next((spec.name for spec in self.specs.values() if spec.stand_in), None)

    def warm_pooled(self) -> frozenset[str]:
        """The hosts the daemon keeps warm workers of (:attr:`HostSpec.warm_pool`)."""
        return frozenset(name for name, spec in self.specs.items() if spec.warm_pool)

    def takes_messages(self, job: Job) -> bool:
        """Whether ``job``'s host takes agent messages (a shell job takes only replies)."""
        spec = self.specs.get(job.host)
        return spec.takes_messages if spec else False
