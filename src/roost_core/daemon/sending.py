"""The ``send`` op's logic, with no I/O: to whom a message goes and whether it may.

:class:`SendDesk` takes a sender (its record in the peer tables), the job it speaks from
(the chain its run is in) and the op's checked arguments; it finds the receiver in the
peer tables, asks the reach, budget, limits, envelope and delivery policies, and hands the
item to the mailroom. What comes out is the answer (or a :class:`Pending` one, made once
the item is durable), the receipts of refusals, and what the mailroom puts out. It holds
no daemon: the daemon's ``send`` op calls it with the caller's connection resolved, and
``tests/unit/test_sending.py`` calls it with records.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from roost_core import identity, policy
from roost_core.config import Config
from roost_core.daemon.budgets import Budgets
from roost_core.daemon.delivery import HeldPush, Mailroom, Pending, settle
from roost_core.daemon.jobs import Job
from roost_core.daemon.ledger import KeyedIds
from roost_core.daemon.peers import ForegroundPeer
from roost_core.daemon.receipts import Receipts
from roost_core.daemon.tables import PeerTables
from roost_core.protocol import BAD_ARGS, NOT_ACCEPTED, UNREACHABLE, ProtocolError
from roost_core.records import OutgoingItem, PeerInfo, ReachablePeer, ScopeRequest

#: ``to`` that starts with this names a broadcast scope (``*children``), never a peer:
#: no sanitised name holds it.
SCOPE_MARK = "*"

_INVERSE = {"parent": "child", "child": "parent"}


def inverse_relation(relation: str) -> str:
    """The relation seen from the other side (parent <-> child; the rest are symmetric)."""
    return _INVERSE.get(relation, relation)


def chain_of(job: Job | None) -> tuple[str | None, int, bool]:
    """The chain a session speaking from ``job`` is in: the trace and hops of what started
    its run, and whether that chain holds a broadcast. A foreground session (no job) is
    where the user sits: what it does starts a new chain."""
    if job is None:
        return None, 0, False
    return job.run_trace, job.run_hops, job.run_broadcast_chain


class SendDesk:
    """Sends and deliveries of agent items (see the module docstring). ``jobs`` and
    ``foreground`` are the daemon's own dicts (read, never copied); ``clock`` is the
    daemon's clock for rate windows."""

    def __init__(
        self,
        tables: PeerTables,
        budgets: Budgets,
        mailroom: Mailroom,
        receipts: Receipts,
        jobs: dict[str, Job],
        foreground: dict[str, ForegroundPeer],
        pm: Any,
        config: Config,
        clock: Callable[[], float],
        ids: KeyedIds | None = None,
    ) -> None:
        self.tables = tables
        self.budgets = budgets
        self.mailroom = mailroom
        self.receipts = receipts
        self.jobs = jobs
        self.foreground = foreground
        self.pm = pm
        self.config = config
        self.clock = clock
        #: Makes a keyed send's message id (the daemon's secret; the ledger's).
        self.ids = ids if ids is not None else KeyedIds()
        #: The plugin set's compiled hooks (the peer tables keep them; one cache).
        self.hooks = tables.hooks

    def send(self, sender: PeerInfo, job: Job | None, args: dict[str, Any]) -> dict[str, Any] | Pending | HeldPush:
        """A ``send`` (``args``: the op's checked arguments) from ``sender``, speaking
        from ``job`` (None: a foreground session, where the user sits, which starts a new
        chain): the answer, or the :class:`Pending` answer once the item is durable.
        Raises the refusal (its receipt recorded)."""
        text = args["message"]
        reply_to = args.get("reply_to")
        if reply_to is not None and not identity.is_message_id(reply_to):
            raise ProtocolError(BAD_ARGS, f"reply_to {reply_to[:40]!r} is not a message id: give the msg of the message you answer (m + 8 hex)")
        self.budgets.check(sender)
        to = args["to"]
        # A keyed send has the same message id each time it is asked, so a receiver that
        # holds it already (pushed before a crash made it durable) drops a second copy.
        key = args.get("key")
        message_id = identity.new_message_id() if key is None else self.ids.message_id(sender.id, key)
        if to.startswith(SCOPE_MARK):
            again = key is not None and bool(args.get("again", False))
            return self.broadcast(sender, job, to[len(SCOPE_MARK):], text, reply_to, args.get("urgent"), message_id, again=again)
        hooks = self.hooks.current()
        target, decision = self.tables.route(sender, to, hooks)
        if not decision.allowed:
            self.receipts.record(sender.id, target.id, target.name, "message", "refused", reason="unreachable", text=text)
            raise ProtocolError(UNREACHABLE, decision.reason or f"peer {target.id} is not reachable")
        trace, hops, broadcast_chain = chain_of(job)
        relation = decision.relation
        # The envelope names the sender as the receiver sees it: my child sees "parent".
        outgoing = OutgoingItem(
            sender, target, text, "message", inverse_relation(relation), hops + 1,
            message_id, reply_to, None, broadcast_chain, args.get("urgent"),
        )
        if not target.accepts_messages:
            self.receipts.record(sender.id, target.id, target.name, "message", "refused", reason=NOT_ACCEPTED, text=text)
            raise ProtocolError(NOT_ACCEPTED, f"{target.id} is a {target.host} job; it takes no messages")
        now = self.clock()
        refusal = hooks.check_send(outgoing, now, self.config)
        if refusal is not None:
            self.receipts.record(sender.id, target.id, target.name, "message", "refused", reason=refusal.code, text=text)
            raise ProtocolError(refusal.code, refusal.message)
        if key is not None and target.kind != "foreground":
            held = self.jobs[target.id].queue.holding(message_id)
            if held is not None:
                # Asked again after the daemon that queued it died before answering: the
                # item waits in the queue already (the journal kept it); not queued twice.
                return {"to": target.id, "name": target.name, "relation": relation, "id": message_id, "result": "queued", "seq": held.seq}
        try:
            content = hooks.frame_item(outgoing)
        except ProtocolError as exc:
            # The framing plugin broke the envelope's rules (plugin_error): nothing is
            # queued or counted, and the sender's receipt says so.
            self.receipts.record(sender.id, target.id, target.name, "message", "refused", reason=exc.code, text=text)
            raise
        # Asked again (``again``): the first ask had room, and may have reached the
        # receiver before the daemon that took it died (pushed before its fsync, or
        # durable and acked before its answer was on record). A refusal now would tell
        # the sender "not sent" about a message the receiver may hold; taken past the
        # cap, a copy the receiver holds already is dropped there by its message id.
        again = key is not None and args.get("again", False)
        answer = self.deliver(
            target,
            outgoing,
            content,
            trace=trace,
            relation=relation,
            delivery=hooks.decide_delivery(outgoing, self.config),
            hold=key is not None,
            past_cap=again,
        )
        # Counted once taken (a full queue raised above: not counted), not once durable: a
        # send pipelined right behind this one is checked against it.
        if hooks.note_sent is not None:
            hooks.note_sent(outgoing, now)
        return answer

    def broadcast(
        self, sender: PeerInfo, job: Job | None, scope: str, text: str, reply_to: str | None, urgent: bool | None, message_id: str,
        *, again: bool = False,
    ) -> dict[str, Any] | Pending:
        """A ``send`` to a scope: the broadcast plugin picks the receivers among the peers
        reach allows inside the tree; each gets its own item, checked by the send limits
        like any message (so each counts towards the rate and hop limits). The result
        lists every receiver and what happened to it, once all items are durable.
        ``again``: asked again, each item is taken past its receiver's cap, as a send's."""
        peers, _rows = self.tables.peer_listing().without(sender)
        decisions = self.tables.reach_all(sender, peers, "scope")
        reachable = tuple(
            ReachablePeer(peer, decision.relation) for peer, decision in zip(peers, decisions, strict=True) if decision.allowed and decision.relation != "external"
        )
        trace, hops, broadcast_chain = chain_of(job)
        request = ScopeRequest(sender=sender, scope=scope, reachable=reachable, broadcast_chain=broadcast_chain, hops=hops)
        plan = policy.plan_broadcast(self.pm, request, self.config)
        if plan.refusal is not None:
            raise ProtocolError(plan.refusal.code, plan.refusal.message)
        answers: list[dict[str, Any] | Pending] = []
        hooks = self.hooks.current()
        for receiver in plan.receivers:
            target = receiver.peer
            outgoing = OutgoingItem(
                sender=sender,
                target=target,
                text=text,
                kind="message",
                relation=inverse_relation(receiver.relation),
                hops=hops + 1,
                id=message_id,
                reply_to=reply_to,
                scope=scope,
                broadcast_chain=True,
                urgent=urgent,
            )
            row = {"to": target.id, "name": target.name, "relation": receiver.relation}
            now = self.clock()
            refusal = hooks.check_send(outgoing, now, self.config)
            if refusal is not None:
                self.receipts.record(sender.id, target.id, target.name, "message", "refused", reason=refusal.code, text=text)
                answers.append({**row, "result": "refused", "code": refusal.code, "reason": refusal.message})
                continue
            try:
                answer = self.deliver(target, outgoing, hooks.frame_item(outgoing), trace=trace, past_cap=again)
            except ProtocolError as exc:
                answers.append({**row, "result": "refused", "code": exc.code, "reason": exc.message})
                continue
            if hooks.note_sent is not None:
                hooks.note_sent(outgoing, now)
            assert not isinstance(answer, HeldPush), "a broadcast never holds a push (hold=False)"
            answers.append(answer)

        def finish() -> dict[str, Any]:
            results = []
            for answer, receiver in zip(answers, plan.receivers, strict=True):
                if not isinstance(answer, Pending):
                    results.append(answer)
                    continue
                try:
                    results.append(answer.finish())
                except ProtocolError as exc:
                    results.append({"to": receiver.peer.id, "name": receiver.peer.name, "relation": receiver.relation, "result": "refused", "code": exc.code, "reason": exc.message})
            for result in results:
                result["relation"] = next(r.relation for r in plan.receivers if r.peer.id == result["to"])
            return {"scope": scope, "id": message_id, "sent": results}

        pending = [answer for answer in answers if isinstance(answer, Pending)]
        # Commits finish in order: once the last item's is over, every item is durable.
        return Pending(pending[-1].commit, finish) if pending else finish()

    def deliver(
        self,
        target: PeerInfo,
        item: OutgoingItem,
        content: str,
        *,
        trace: str | None = None,
        wake: bool = True,
        relation: str | None = None,
        delivery: str | None = None,
        hold: bool = False,
        past_cap: bool = False,
    ) -> dict[str, Any] | Pending | HeldPush:
        """Hand an agent item on, with no wait: pushed to a connected foreground peer (the
        result at once), or queued on the target job (a :class:`Pending` result, made once
        the item's commit is over). The result's ``relation`` is ``relation`` (the target
        as the sender sees it) when given, else the item's; ``delivery`` is the delivery
        plugin's answer for the item when the caller has asked it already. ``hold``: a
        foreground push waits for the caller's record of the answer (:class:`HeldPush`).
        ``past_cap``: a job's item is queued even at the cap (a send asked again)."""
        answer = {"to": target.id, "name": target.name, "relation": relation or item.relation}
        if item.id is not None:
            answer["id"] = item.id
        if delivery is None:
            delivery = self.hooks.current().decide_delivery(item, self.config)
        if target.kind == "foreground":
            return self.mailroom.to_peer(self.foreground[target.id], target, item, content, delivery, answer, trace=trace, hold=hold)
        job = self.jobs[target.id]
        # A tree whose budget is spent is not woken by agents: only running runs go on
        # (a user reply still starts one).
        wake = wake and not self.budgets.spent(job.tree)
        return self.mailroom.to_job(job, target, item, content, delivery, answer, trace=trace, wake=wake, past_cap=past_cap)



async def deliver_to(
    desk: SendDesk, target: PeerInfo, item: OutgoingItem, content: str, *, trace: str | None = None, wake: bool = True
) -> dict[str, Any]:
    """Deliver an agent item the daemon makes (a report, a notice) to whoever holds
    ``target``'s session now; the result once it is durable (:meth:`SendDesk.deliver`)."""
    return await settle(desk.deliver(target, item, content, trace=trace, wake=wake))
