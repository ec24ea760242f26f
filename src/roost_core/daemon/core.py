"""The daemon: its state and mechanism (:mod:`~roost_core.daemon.base`) with the ops of
:mod:`~roost_core.daemon.ops_jobs`, :mod:`~roost_core.daemon.ops_messaging` and
:mod:`~roost_core.daemon.handback`, with watches (:mod:`~roost_core.daemon.watches`) and
tree budgets (:mod:`~roost_core.daemon.budget`). Ops are plain async methods that take a
connection and checked arguments and return a result dict or raise ``ProtocolError``;
:mod:`roost_core.daemon.dispatch` holds the dispatch table and does one request,
:mod:`roost_core.daemon.wire` does the socket I/O, :mod:`roost_core.daemon.server` the
daemon's life.
"""

from __future__ import annotations

from roost_core.daemon.budget import BudgetOps
from roost_core.daemon.handback import HandbackOps
from roost_core.daemon.ops_jobs import JobOps
from roost_core.daemon.ops_messaging import MessagingOps
from roost_core.daemon.watches import WatchOps


class Daemon(JobOps, MessagingOps, HandbackOps, WatchOps, BudgetOps):
    """One per user: everything the daemon knows, and every op."""
