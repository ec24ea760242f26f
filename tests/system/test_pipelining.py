"""Pipelined requests on one connection: a client writes many requests without waiting.

Sends are answered once durable, from their journal commit, while the connection's next
requests go on; every request still takes effect, and is answered, in the order it came.
"""

from __future__ import annotations

import json
import os
import socket

import pytest
from conftest import wait_until
from reliability.kit import Raw

QUIET = {"default": {"steps": [{"say": "ok: {input}"}]}}


def bound(daemon) -> Raw:
    conn = Raw(daemon.paths.socket)
    answer = conn.request({"id": "reg", "op": "peer_register", "pid": os.getpid(), "name": "pipeliner"})
    assert answer["ok"], answer
    return conn


def stopped_child(daemon, conn: Raw) -> str:
    """A child of ``conn``'s session, stopped: messages to it are stored, never delivered."""
    answer = conn.request({"id": "spawn", "op": "spawn", "task": "first", "name": "kid", "scenario": QUIET})
    assert answer["ok"], answer
    kid = answer["result"]["id"]
    daemon.wait_job(kid)
    daemon.call("stop", job=kid)
    daemon.wait_reaped(kid)
    return kid


def write_all(conn: Raw, frames: list[dict]) -> None:
    """Every frame in one write: the daemon reads them all before answering any."""
    conn.send(b"".join(json.dumps(frame).encode() + b"\n" for frame in frames))


def test_pipelined_sends_share_a_commit_and_are_answered_in_order(daemon):
    with bound(daemon) as conn:
        kid = stopped_child(daemon, conn)
        before = daemon.call("daemon_status")["journal"]
        write_all(conn, [{"id": n, "op": "send", "to": kid, "message": f"message {n}"} for n in range(1, 16)])
        answers = [conn.read() for _ in range(15)]
        after = daemon.call("daemon_status")["journal"]
    assert [answer["id"] for answer in answers] == list(range(1, 16))
    assert all(answer["ok"] and answer["result"]["result"] == "stopped" for answer in answers), answers
    seqs = [answer["result"]["seq"] for answer in answers]
    assert seqs == sorted(seqs) and len(set(seqs)) == 15
    assert after["records"] - before["records"] == 15
    # Read together, accepted together: one commit (two if one was already in flight).
    assert 1 <= after["commits"] - before["commits"] <= 2
    assert daemon.job(kid)["pending"] == 15


def test_other_ops_and_errors_between_sends_keep_their_place(daemon):
    with bound(daemon) as conn:
        kid = stopped_child(daemon, conn)
        write_all(
            conn,
            [
                {"id": 1, "op": "send", "to": kid, "message": "one"},
                {"id": 2, "op": "send", "to": "no-such-peer", "message": "lost"},
                {"id": 3, "op": "send", "to": kid, "message": "two"},
                {"id": 4, "op": "peers"},
                {"id": 5, "op": "no_such_op"},
                {"id": 6, "op": "send", "to": kid, "message": "three"},
            ],
        )
        answers = [conn.read() for _ in range(6)]
    assert [answer["id"] for answer in answers] == [1, 2, 3, 4, 5, 6]
    assert [answer["ok"] for answer in answers] == [True, False, True, True, False, True]
    assert answers[1]["error"]["code"] == "not_found"
    assert answers[4]["error"]["code"] == "unknown_op"
    # The listing was made after the sends before it took effect: kid holds two items.
    (row,) = [row for row in answers[3]["result"]["peers"] if row["id"] == kid]
    assert row["state"] == "stopped"
    assert answers[3]["result"]["sent"][-1]["preview"] == "two"
    assert daemon.job(kid)["pending"] == 3


def test_the_rate_limit_counts_sends_still_waiting_for_the_disk(daemon_factory, write_config):
    write_config({"agentMessagesPerMinute": 5})
    daemon = daemon_factory().start()
    with bound(daemon) as conn:
        kid = stopped_child(daemon, conn)
        write_all(conn, [{"id": n, "op": "send", "to": kid, "message": f"m{n}"} for n in range(1, 9)])
        answers = [conn.read() for _ in range(8)]
    assert [answer["ok"] for answer in answers] == [True] * 5 + [False] * 3
    assert {answer["error"]["code"] for answer in answers[5:]} == {"rate_limited"}
    assert daemon.job(kid)["pending"] == 5


def test_a_client_gone_before_its_answers_loses_nothing_it_sent(daemon):
    with bound(daemon) as conn:
        kid = stopped_child(daemon, conn)
        before = daemon.call("daemon_status")["journal"]["records"]
        write_all(conn, [{"id": n, "op": "send", "to": kid, "message": f"m{n}"} for n in range(1, 11)])
    # No answer was read: the sends that reached the daemon are still made durable.
    wait_until(lambda: daemon.call("daemon_status")["journal"]["records"] - before == 10, what="ten records written")
    daemon.kill9()
    daemon.restart()
    assert daemon.job(kid)["pending"] == 10


def test_a_client_writing_more_than_the_daemon_holds_waits_and_loses_nothing(daemon_factory, write_config):
    """300 requests in one write, the first an op that waits (``peers``): the rest wait
    behind it (the daemon stops reading the socket while too many wait), then are done
    and answered in order; sends to a foreground peer are pushed to it in order."""
    write_config({"agentMessagesPerMinute": 100_000, "agentExternalMessages": True})
    daemon = daemon_factory().start()
    with bound(daemon) as conn, Raw(daemon.paths.socket) as receiver:
        registered = receiver.request({"id": "reg", "op": "peer_register", "pid": os.getpid(), "name": "receiver"})
        assert registered["ok"], registered
        fg = registered["result"]["id"]
        kid = stopped_child(daemon, conn)
        frames: list[dict] = [{"id": 1, "op": "peers"}]
        for n in range(2, 301):
            to = kid if n % 3 == 0 else fg
            frames.append({"id": n, "op": "send", "to": to, "message": f"m{n}"})
        write_all(conn, frames)
        answers = [conn.read() for _ in range(300)]
        # Pushed before the sends were answered, so before this answer too.
        assert receiver.request({"id": "after", "op": "peers"})["ok"]
        pushed = [event for event in receiver.events if event["event"] == "deliver"]
    assert [answer["id"] for answer in answers] == list(range(1, 301))
    assert answers[0]["ok"]
    to_kid = [answer for answer in answers[1:] if answer["id"] % 3 == 0]
    to_fg = [answer for answer in answers[1:] if answer["id"] % 3 != 0]
    # The kid's queue takes 20 agent items; the rest are refused, none lost unanswered.
    assert [answer["ok"] for answer in to_kid] == [True] * 20 + [False] * (len(to_kid) - 20)
    assert {answer["error"]["code"] for answer in to_kid[20:]} == {"queue_full"}
    assert [answer.get("result", answer.get("error")) for answer in to_fg if not answer["ok"] or answer["result"]["result"] != "delivered"] == []
    assert [event["text"] for event in pushed] == [f"m{answer['id']}" for answer in to_fg]
    assert daemon.job(kid)["pending"] == 20


@pytest.mark.parametrize("lane_ops", [True, False], ids=["with-ops-that-wait", "sends-only"])
def test_a_client_that_ends_its_writes_still_reads_every_answer(daemon, lane_ops):
    """A client that writes its requests and shuts its write side at once (as ``socat``
    or a shell pipe does) gets every answer, in order, then the end of the stream: ops
    that wait in the connection's lane and sends waiting for the disk finish first (with
    sends only, nothing is in the lane when the stream ends: their answers still wait
    for the disk)."""
    with bound(daemon) as conn:
        kid = stopped_child(daemon, conn)
        frames = [
            {"id": n, "op": "peers"} if lane_ops and n % 10 == 0 else {"id": n, "op": "send", "to": kid, "message": f"m{n}"}
            for n in range(1, 101)
        ]
        write_all(conn, frames)
        conn.sock.shutdown(socket.SHUT_WR)
        answers = [conn.read() for _ in range(100)]
        assert conn.sock.recv(1) == b"", "the daemon closes once every answer is out"
    assert [answer["id"] for answer in answers] == list(range(1, 101))
    assert all(answer["ok"] for answer in answers if lane_ops and answer["id"] % 10 == 0)
    sends = [answer for answer in answers if not lane_ops or answer["id"] % 10 != 0]
    # The kid's queue takes 20 agent items; the rest are refused, every one answered.
    assert [answer["ok"] for answer in sends] == [True] * 20 + [False] * (len(sends) - 20)
    assert {answer["error"]["code"] for answer in sends[20:]} == {"queue_full"}
    assert daemon.job(kid)["pending"] == 20


def test_a_client_that_never_reads_is_dropped_and_the_daemon_goes_on(daemon_factory, write_config):
    """A foreground session that stops reading (hung, or suspended) while messages keep
    coming is not kept without bound: once more than 64 MiB wait for it, its connection
    is dropped; its sender is told ``not running`` from then on, and the daemon serves
    everyone else."""
    write_config({"agentMessagesPerMinute": 1_000_000, "agentExternalMessages": True})
    daemon = daemon_factory().start()
    body = "x" * 7_900
    with bound(daemon) as conn, Raw(daemon.paths.socket) as sleeper:
        registered = sleeper.request({"id": "reg", "op": "peer_register", "pid": os.getpid(), "name": "sleeper"})
        assert registered["ok"], registered
        target = registered["result"]["id"]
        results: list[str] = []
        while "not running" not in results:
            # Each deliver event carries the text twice (framed and plain): 64 MiB is about
            # 4,200 of them; far more means nothing bounds what waits for this client.
            assert len(results) < 12_000, "the daemon kept far more than 64 MiB for a client that never reads"
            first = len(results)
            write_all(conn, [{"id": first + k, "op": "send", "to": target, "message": body} for k in range(100)])
            results += [conn.read()["result"]["result"] for _ in range(100)]
        delivered = results.index("not running")
        assert set(results[:delivered]) == {"delivered"}
        assert set(results[delivered:]) == {"not running"}
        # What was pushed before the drop passed the bound (an event is at most twice the
        # text and 1 KiB of envelope and fields).
        assert delivered * (2 * len(body) + 1024) > 64 * 1024 * 1024
        # The sleeper's end of the stream comes after what the kernel still held for it.
        with pytest.raises((EOFError, ConnectionResetError)):
            while True:
                sleeper.read()
        assert conn.request({"id": "after", "op": "peers"})["ok"]
    assert "reads too slowly" in daemon.paths.daemon_log.read_text()


def test_a_keyed_send_waiting_for_its_record_keeps_its_place_in_the_receivers_order(daemon_factory, write_config):
    """A keyed send to a foreground peer is pushed once its answer is on record (a commit
    away); an unkeyed item accepted meanwhile (here the next frame; in a tree, a child's
    report while another child's reply is written) is numbered after it and must reach the
    receiver after it: a receiver's items arrive in seq order, as a queue's do."""
    write_config({"agentExternalMessages": True})
    daemon = daemon_factory().start()
    with bound(daemon) as conn, Raw(daemon.paths.socket) as receiver:
        registered = receiver.request({"id": "reg", "op": "peer_register", "pid": os.getpid(), "name": "receiver"})
        assert registered["ok"], registered
        fg = registered["result"]["id"]
        write_all(
            conn,
            [
                {"id": 1, "op": "send", "to": fg, "message": "keyed first", "key": "k-first"},
                {"id": 2, "op": "send", "to": fg, "message": "plain second"},
                {"id": 3, "op": "send", "to": fg, "message": "keyed third", "key": "k-third"},
                {"id": 4, "op": "send", "to": fg, "message": "plain fourth"},
            ],
        )
        answers = [conn.read() for _ in range(4)]
        assert all(answer["ok"] and answer["result"]["result"] == "delivered" for answer in answers), answers
        # Every push was made before its send's answer: one more request round-trip on the
        # receiver's connection reads them all.
        assert receiver.request({"id": "after", "op": "peers"})["ok"]
        pushed = [(event["seq"], event["text"]) for event in receiver.events if event["event"] == "deliver"]
    assert [seq for seq, _ in pushed] == [answer["result"]["seq"] for answer in answers] == sorted(seq for seq, _ in pushed), pushed
    assert [text for _, text in pushed] == ["keyed first", "plain second", "keyed third", "plain fourth"]
