"""The user config while the daemon runs: read again when its file changes.

The daemon reads ``roost.json`` (or ``roost.toml`` beside it) at its start, and again
when the file's size, time or inode has moved since (:meth:`LiveConfig.check`: at a job
start, a status, ``daemon_reload``, and each monitor pass). A file that cannot be read
or holds a wrong value is refused (``bad_config``, naming file, line and column) and the
last good config stays in force; workers take the config the daemon holds (in their
hello), never the file, so an edit cannot make a job fail on its own.

Two parts are fixed at the daemon's start and wait for the next one: the plugin set
(``plugins.disable``: the daemon's plugin manager and every worker's must block the same
names) and the warm pool's size (``piPool``, ``piPoolSize``, ``piPoolMax``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import attrs

from roost_core.config import Config, ConfigError, load_user_config

log = logging.getLogger("roost.daemon")

#: Config keys a change of which takes effect at the next daemon start.
AT_RESTART = ("plugins.disable", "piPool", "piPoolSize", "piPoolMax")

#: A file as :func:`os.stat` last saw it (None: there is none).
Stamp = tuple[int, int, int] | None


def stamp(path: Path) -> Stamp:
    try:
        seen = os.stat(path)
    except OSError:
        return None
    return seen.st_mtime_ns, seen.st_size, seen.st_ino


class LiveConfig:
    """The config in force, and the file it comes from.

    :param config_file: the user config file (``roost.json``; ``roost.toml`` beside it
        counts too).
    :param config: what the daemon read at its start.
    """

    def __init__(self, config_file: Path, config: Config) -> None:
        self.config_file = config_file
        self.started = config
        self.current = config
        #: Why the file as it is now is refused (None: what it says is in force).
        self.refused: str | None = None
        self._stamps = self.stamps()

    def stamps(self) -> tuple[Stamp, Stamp]:
        return stamp(self.config_file), stamp(self.config_file.with_suffix(".toml"))

    def check(self) -> Config | None:
        """Read the file again if it changed since the last look: the new config when it
        differs from the one in force (the caller puts it in force), else None. A file
        that cannot be read is refused (:attr:`refused`) and changes nothing."""
        stamps = self.stamps()
        if stamps == self._stamps:
            return None
        self._stamps = stamps
        try:
            read = load_user_config(self.config_file)
        except ConfigError as exc:
            if self.refused != str(exc):
                log.warning("bad_config: %s; the config read before stays in force", exc)
            self.refused = str(exc)
            return None
        if self.refused is not None:
            log.info("config %s is read again and in force", self.config_file)
        self.refused = None
        # The fields fixed at the start keep their values (see the module docstring).
        started = self.started
        config = attrs.evolve(
            read, disabled_plugins=started.disabled_plugins, pi_pool=started.pi_pool, pi_pool_size=started.pi_pool_size, pi_pool_max=started.pi_pool_max
        )
        if config == self.current and config.raw == self.current.raw:
            return None
        self.current = config
        log.info("config %s changed: in force from now on", self.config_file)
        return config

    def waiting(self) -> list[str]:
        """The keys (of :data:`AT_RESTART`) whose new values in the file wait for the next
        daemon start."""
        raw, started = self.current.raw, self.started
        running = {"piPool": started.pi_pool, "piPoolSize": started.pi_pool_size, "piPoolMax": started.pi_pool_max}
        waiting = ["plugins.disable"] if tuple((raw.get("plugins") or {}).get("disable") or ()) != started.disabled_plugins else []
        return waiting + [key for key, value in running.items() if key in raw and raw[key] != value]

    def worker_view(self) -> dict[str, Any]:
        """The config a worker takes in its hello: the one in force, as a mapping that
        :meth:`Config.from_mapping` reads back (with the plugin set the daemon runs)."""
        raw = dict(self.current.raw)
        plugins = dict(raw.get("plugins") or {})
        plugins["disable"] = list(self.started.disabled_plugins)
        raw["plugins"] = plugins
        return raw

    def status(self) -> dict[str, Any]:
        """What ``daemon_status`` and ``daemon_reload`` say of the config."""
        return {"file": str(self.config_file), "refused": self.refused, "atNextStart": self.waiting()}

