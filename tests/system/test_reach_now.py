"""Reach is right at the moment of every send and every listing (issue 40, point 2).

A team's reach plugin that reads an allowlist file, loaded by a real daemon from its
entry point. Two foreground sessions in two session trees (the default reach refuses
them) talk through the socket ops (``roost_send`` and ``roost_agents`` as tool calls, and
``peers``): writing the pair into the file grants reach on the very next send, and taking
it out revokes it on the very next one, by name and by id, and every listing agrees, with
no restart and no change to the peer table (the two sessions stay connected, and a
foreground peer's table fields, its name, session, cwd and connection, do not move on a
send). The plugin does not mark its decision pure, so the daemon keeps none of it.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
from fg import in_thread, send, session

#: The team's plugin: a pair ``SENDER TARGET`` per line of the file the user config names.
ALLOWLIST_REACH = '''
from pathlib import Path

from roost_core import hookimpl
from roost_core.records import ReachDecision


@hookimpl
def roost_decide_reach(sender, target, config):
    """Allow the pairs in the allowlist file; no opinion on the rest (not pure: it reads
    a file, so roost asks it at every send and listing)."""
    try:
        lines = Path(config.raw["allowlistFile"]).read_text().splitlines()
    except OSError:
        return None
    if [sender.name, target.name] in [line.split() for line in lines]:
        return ReachDecision(allowed=True, relation="external")
    return None
'''


def install_allowlist_reach(site: Path) -> dict[str, str]:
    """The plugin as an installed distribution on a path entry of its own; the daemon's
    environment that finds it."""
    site.mkdir()
    (site / "roosttest_allowlist_reach.py").write_text(ALLOWLIST_REACH)
    info = site / "allowlist_reach-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: allowlist-reach\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[roost]\nallowlist-reach = roosttest_allowlist_reach\n")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


def test_editing_the_allowlist_grants_and_revokes_reach_on_the_very_next_send(daemon_factory, write_config, tmp_path):
    allowlist = tmp_path / "allowlist"
    allowlist.write_text("")
    write_config({"allowlistFile": str(allowlist)})
    daemon = daemon_factory(**install_allowlist_reach(tmp_path / "site")).start()

    async def main() -> None:
        async with session(daemon, tmp_path, "alice") as alice, session(daemon, tmp_path, "bob") as bob:
            bob_id = await bob.ensure_registered()
            await alice.ensure_registered()
            table = await in_thread(peer_table, daemon)

            async def listed() -> list[tuple[str, str]]:
                """What alice's listings show: the tool's and the op's, which agree."""
                _, _, by_tool = await alice.call_tool("roost_agents", {})
                by_op = await alice.call("peers")
                rows = [(row["name"], row["relation"]) for row in by_tool["peers"]]
                assert rows == [(row["name"], row["relation"]) for row in by_op["peers"]]
                return rows

            async def refused(to: str) -> str:
                ok, text, _ = await send(alice, to, "may I?")
                assert not ok
                return text

            # Not in the file: the default reach refuses (bob is in another tree).
            assert "error (unreachable)" in await refused("bob")
            assert "error (unreachable)" in await refused(bob_id)
            assert await listed() == []

            allowlist.write_text("alice bob\n")  # granted: the very next send goes
            ok, _, answer = await send(alice, "bob", "granted, by name")
            assert ok and (answer["to"], answer["relation"], answer["result"]) == (bob_id, "external", "delivered")
            ok, _, answer = await send(alice, bob_id, "granted, by id")
            assert ok and answer["result"] == "delivered"
            assert await listed() == [("bob", "external")]
            await bob.wait_for_delivery(2)

            allowlist.write_text("bob alice\n")  # revoked (only the other way round now)
            assert "error (unreachable)" in await refused(bob_id)
            assert "error (unreachable)" in await refused("bob")
            assert await listed() == []

            allowlist.write_text("alice bob\n")  # and granted again
            ok, _, answer = await send(alice, bob_id, "granted again")
            assert ok and answer["result"] == "delivered"
            await bob.wait_for_delivery(3)
            assert [item["text"] for item in bob.delivered] == ["granted, by name", "granted, by id", "granted again"]
            assert await in_thread(peer_table, daemon) == table  # the same peers, the same records

    anyio.run(main)


def peer_table(daemon) -> list[tuple[str, str, str, str]]:
    """The records the peer table is made from, as the daemon lists them."""
    return sorted((row["id"], row["name"], row["kind"], str(row.get("session"))) for row in daemon.call("agents")["agents"])
