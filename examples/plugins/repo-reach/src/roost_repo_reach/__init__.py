"""roost-repo-reach: sessions working in one git repository count as one tree.

A reach plugin (entry point ``repo-reach``). Two peers whose working directories are in
the same git repository may message each other, by id or by exact name, and see each
other in ``roost_agents``, with relation ``tree``, as if one session had spawned the
other. Peers named in the user config key ``repoReachAllow`` (a list of names) are
reachable from anywhere, with relation ``external``.

It *refines* whatever the reach policy in front of it answered (a hook wrapper), so it
never has to know how session trees work: a decision inside a session tree (``parent``,
``child``, ``sibling``, ``tree``) is kept as it is, refusals included; only an answer of
relation ``external`` (or no answer at all) is widened.

"Same repository" means the same git directory, found by walking up from the peer's cwd
to the first ``.git``: worktrees of one repository share it (through their
``commondir``), a submodule has its own. Nothing runs ``git``; the file system is read
and the answer is cached for :data:`CACHE_SECONDS`.

The decision is *not* marked ``roost_core.pure``: it depends on the file system, not only
on the two peers and the config, so the daemon keeps none of its decisions and asks at
every send and every listing (a ``git init`` counts within :data:`CACHE_SECONDS`, with no
change to the peer table). Its own cache is what keeps that cheap.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roost_core import hookimpl
from roost_core.records import ReachDecision

if TYPE_CHECKING:
    from roost_core.config import Config
    from roost_core.records import PeerInfo

__version__ = "0.1.0"

log = logging.getLogger("roost.plugins.repo-reach")

#: The user config key: a list of peer names reachable from any session.
ALLOW_KEY = "repoReachAllow"
#: How long the repository of a directory is remembered (a ``git init`` shows up after it).
CACHE_SECONDS = 5.0
_CACHE_MAX = 4096
_cache: dict[str, tuple[float, str | None]] = {}
_warned = False


def _git_dir_of(dot_git: Path) -> str:
    """The repository's own git dir for a ``.git`` entry: the directory itself, or for a
    ``.git`` file (worktree, submodule) the ``gitdir:`` it names, followed to its
    ``commondir`` when it has one (so every worktree of a repository gives the same)."""
    if dot_git.is_dir():
        return str(dot_git.resolve())
    try:
        first = dot_git.read_text(encoding="utf-8", errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return str(dot_git.parent.resolve())
    if not first.startswith("gitdir:"):
        return str(dot_git.parent.resolve())
    git_dir = (dot_git.parent / first[len("gitdir:") :].strip()).resolve()
    try:
        common = (git_dir / "commondir").read_text(encoding="utf-8").strip()
    except OSError:
        return str(git_dir)
    return str((git_dir / common).resolve())


def find_repository(cwd: str | None) -> str | None:
    """The git directory of the repository ``cwd`` is in, or None (no cwd, not in a repo).

    Walks up from ``cwd`` (symlinks resolved) to the first directory holding ``.git``.
    """
    if not cwd:
        return None
    try:
        start = Path(os.path.realpath(cwd))
    except (OSError, ValueError):
        return None
    for directory in (start, *start.parents):
        dot_git = directory / ".git"
        try:
            if dot_git.exists():
                return _git_dir_of(dot_git)
        except OSError:
            return None
    return None


def repository_of(cwd: str | None, now: float | None = None) -> str | None:
    """:func:`find_repository`, remembered for :data:`CACHE_SECONDS` per directory (a
    ``peers`` listing asks once per peer)."""
    if not cwd:
        return None
    now = time.monotonic() if now is None else now
    hit = _cache.get(cwd)
    if hit is not None and now - hit[0] < CACHE_SECONDS:
        return hit[1]
    if len(_cache) >= _CACHE_MAX:
        _cache.clear()
    repository = find_repository(cwd)
    _cache[cwd] = (now, repository)
    return repository


def clear_cache() -> None:
    """Forget every remembered repository (tests that create repositories call this)."""
    _cache.clear()


def same_repository(sender: PeerInfo, target: PeerInfo) -> bool:
    """True when both peers have a cwd and both cwds are in one git repository."""
    mine = repository_of(sender.cwd)
    return mine is not None and mine == repository_of(target.cwd)


def allowed_names(config: Config | Any) -> frozenset[str]:
    """The names in the user config's ``repoReachAllow``; a wrong type counts as empty."""
    raw = getattr(config, "raw", None) or {}
    names = raw.get(ALLOW_KEY, ())
    if not isinstance(names, (list, tuple)) or not all(isinstance(name, str) for name in names):
        global _warned
        if not _warned:
            _warned = True
            log.warning("%s must be a list of peer names; ignoring it", ALLOW_KEY)
        return frozenset()
    return frozenset(names)


@hookimpl(wrapper=True)
def roost_decide_reach(
    sender: PeerInfo, target: PeerInfo, addressed_by: str, config: Config
) -> Generator[None, ReachDecision | None, ReachDecision | None]:
    """Widen an ``external`` answer: same repository -> ``tree``; an allow-listed
    target name -> ``external``, allowed. Every other answer is kept. Not pure (it reads
    the file system): asked at every send and listing."""
    decision = yield
    if decision is not None and decision.relation != "external":
        return decision
    if same_repository(sender, target):
        return ReachDecision(allowed=True, relation="tree")
    if decision is not None and decision.allowed:
        return decision
    if target.name in allowed_names(config):
        return ReachDecision(allowed=True, relation="external")
    return decision
