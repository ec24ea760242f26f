"""The conformance suite as a host plugin's author runs it (``roost_core.conformance``'s
docstring): the scenarios imported into a test module, a ``conformance_host`` fixture of
its own with a driver (here the scripted host's, standing in for a third party's) and the
packaged :class:`~roost_core.conformance.RoostDaemon`, none of roost's own test fixtures."""

from __future__ import annotations

import os

import pytest
from drivers import ScriptedDriver

from roost_core.conformance import SCENARIOS, HostUnderTest, RoostDaemon

globals().update(SCENARIOS)


@pytest.fixture
def conformance_host(tmp_path):
    env = {**os.environ, "ROOST_HOME": str(tmp_path / "roost")}
    driver = ScriptedDriver()
    driver.setup(tmp_path, env)
    daemons = []

    def daemon():
        daemons.append(RoostDaemon(env))
        return daemons[-1]

    yield HostUnderTest(driver, env, tmp_path, daemon)
    for made in daemons:
        made.cleanup()
    driver.cleanup()
