"""The conformance suite's fixture: ``conformance_host``, parametrised over every host that
has a driver (``drivers.DRIVERS``); a host whose program is not installed skips (or fails,
with its ``ROOST_REQUIRE_<HOST>=1``, as in its own kit)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# The host kits this suite drives, as their own conftests put them on the path.
for folder in (HERE, HERE.parent / "pi", HERE.parent / "claude", HERE.parent / "clis"):
    sys.path.append(str(folder))

from drivers import DRIVERS  # noqa: E402

from roost_core.conformance import HostUnderTest  # noqa: E402

# A scenario drives a real agent program through a few model calls (two starts at most).
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(params=sorted(DRIVERS))
def conformance_host(request: pytest.FixtureRequest, tmp_path: Path, roost_env: dict[str, str], daemon_factory) -> Iterator[HostUnderTest]:
    driver = DRIVERS[request.param]()
    driver.setup(tmp_path, roost_env)
    try:
        yield HostUnderTest(driver, roost_env, tmp_path, daemon_factory)
    finally:
        driver.cleanup()
