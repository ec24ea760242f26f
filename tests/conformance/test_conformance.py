"""The host conformance suite (``roost_core.conformance``) on every host roost ships: each
scenario once per host (``conformance_host``, ``conftest.py``)."""

from __future__ import annotations

import json

import pytest
from drivers import DRIVERS, NOT_AGENT_HOSTS, gemini_inputs

from roost_core.conformance import SCENARIOS, ModelInput
from roost_core.hosts import registered_hosts
from roost_core.plugins import make_plugin_manager

globals().update(SCENARIOS)

pytestmark = pytest.mark.timeout(300)


def test_every_registered_host_has_a_driver():
    hosts = set(registered_hosts(make_plugin_manager(autoload=False)))
    assert hosts - set(NOT_AGENT_HOSTS) == set(DRIVERS), "a host roost registers has no conformance driver (tests/conformance/drivers.py)"


def test_the_gemini_reader_reads_a_resumed_tool_response_once():
    """Gemini CLI's ``--resume`` replays a tool's response twice in one content (the same
    part): read once; two calls' responses stay two inputs."""
    response = {"functionResponse": {"id": "call_1", "name": "run_shell_command", "response": {"output": "found &lt;x&gt;"}}}
    other = {"functionResponse": {"id": "call_2", "name": "run_shell_command", "response": {"output": "found &lt;x&gt;"}}}
    call = {"functionCall": {"id": "call_1", "name": "run_shell_command", "args": {}}}
    contents = [{"role": "model", "parts": [call]}, {"role": "user", "parts": [response, response]}, {"role": "user", "parts": [response, other]}]
    assert gemini_inputs(contents) == [
        ModelInput("assistant", json.dumps(call["functionCall"])),
        ModelInput("tool", "found <x>"),
        ModelInput("tool", "found <x>"),
        ModelInput("tool", "found <x>"),
    ]
