"""The host conformance suite (``roost_core.conformance``) on every host roost ships: each
scenario once per host (``conformance_host``, ``conftest.py``)."""

from __future__ import annotations

import pytest
from drivers import DRIVERS, NOT_AGENT_HOSTS

from roost_core.conformance import SCENARIOS
from roost_core.hosts import registered_hosts
from roost_core.plugins import make_plugin_manager

globals().update(SCENARIOS)

pytestmark = pytest.mark.timeout(300)


def test_every_registered_host_has_a_driver():
    hosts = set(registered_hosts(make_plugin_manager(autoload=False)))
    assert hosts - set(NOT_AGENT_HOSTS) == set(DRIVERS), "a host roost registers has no conformance driver (tests/conformance/drivers.py)"
