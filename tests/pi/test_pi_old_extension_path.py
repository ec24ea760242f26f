"""pi settings that still name the extension where roost kept it before it moved to
roost_plugins/pi (``roost_core/pi/roost-extension.ts``, what ``roost pi install`` wrote
then) keep working: a foreground pi gets roost's extension from there, and a background
job whose pi reads those settings loads it once."""

from __future__ import annotations

from pathlib import Path

from conftest import wait_until
from hostkit import JsonLinesProgram
from pikit import PiKit, RpcPi

import roost_core

OLD_PATH = Path(roost_core.__file__).resolve().parent / "pi" / "roost-extension.ts"


class SettingsPi(RpcPi):
    """A pi in RPC mode that loads only the extensions its settings name (no ``-e``)."""

    def __init__(self, kit: PiKit, session: Path, cwd: Path) -> None:
        self.responses = {}
        self.ids = 0
        JsonLinesProgram.__init__(self, [kit.pi, "--mode", "rpc", "--session", str(session)], kit.env, cwd)


def test_a_foreground_pi_whose_settings_name_the_old_path_joins_roost(pi_kit, write_config, tmp_path):
    write_config({"agentExternalMessages": True})
    fake = pi_kit.fake({"run": [{"match": "who", "steps": [{"agents": {}}, {"say": "listed them"}]}], "default": {"steps": [{"say": "ok"}]}})
    pi_kit.update_settings({"extensions": [str(OLD_PATH)]})
    daemon = pi_kit.daemon()
    pi_kit.require_socket_command()
    pi = SettingsPi(pi_kit, tmp_path / "fg" / "s.jsonl", tmp_path / "work")
    pi_kit.rpcs.append(pi)
    pi.state()
    pi.prompt("who is around?")
    wait_until(lambda: daemon.call("daemon_status")["foreground"] == 1, what="the pi peer")
    assert fake.requests()[0]["tools"].count("roost_agents") == 1


def test_a_pi_job_whose_settings_name_the_old_path_loads_the_extension_once(pi_kit):
    fake = pi_kit.fake({"default": {"steps": [{"agents": {}}, {"say": "Done: {input}"}]}})
    pi_kit.update_settings({"extensions": [str(OLD_PATH)]})
    daemon = pi_kit.daemon()
    job = daemon.start_job("look around", host="pi", name="looker")
    row = daemon.wait_job(job, timeout=60)
    assert row["state"] == "done", row
    assert row["summary"] == "Done: look around"
    assert [request["tools"].count("roost_agents") for request in fake.requests()] == [1, 1]
