"""What a host's CLI says on stderr, kept for a failed run's error
(``roost_core.worker.stderrtail``), and the versions of each CLI roost was tested with
(each host's ``tested_versions``, against the pins in ``tests/<cli>/package-lock.json``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roost_core.hosts.process import installed_version, untested_note
from roost_core.worker.main import with_stderr
from roost_core.worker.stderrtail import MAX_LINE_CHARS, MAX_LINES, MAX_PARTIAL_BYTES, StderrTail

TESTS = Path(__file__).resolve().parent.parent


def test_the_tail_keeps_the_last_non_blank_lines_clean_and_bounded():
    tail = StderrTail()
    tail.feed(b"\x1b[31merror:\x1b[0m unexpected arg")
    tail.feed(b"ument '--x'\r\n\n   \n")
    assert tail.since(0) == ["error: unexpected argument '--x'"]
    point = tail.count()
    tail.feed(b"".join(b"line %d\n" % n for n in range(20)) + b"x" * (MAX_LINE_CHARS + 50) + b"\n")
    kept = tail.since(point)
    assert len(kept) == MAX_LINES and kept[:-1] == [f"line {n}" for n in range(20 - MAX_LINES + 1, 20)]
    assert kept[-1] == "x" * MAX_LINE_CHARS + "…"
    # A line with no end is held, bounded, and counts once the stream ends.
    tail.feed(b"y" * (MAX_PARTIAL_BYTES * 3))
    tail.end()
    assert tail.since(tail.count() - 1) == ["y" * MAX_LINE_CHARS + "…"]
    assert tail.since(tail.count()) == []


def test_a_failed_runs_error_names_the_stderr_lines_on_one_line():
    assert with_stderr("codex exited 2", "codex", ["error: bad flag", "Usage: codex"]) == "codex exited 2 (codex stderr: error: bad flag | Usage: codex)"
    assert with_stderr("codex exited 2", "codex", []) == "codex exited 2"
    assert with_stderr(None, "gemini", ["boom"]) == "gemini failed (gemini stderr: boom)"


def test_the_installed_version_is_read_from_the_programs_package(tmp_path):
    package = tmp_path / "node_modules" / "@scope" / "cli"
    (package / "bin").mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": "@scope/cli", "version": "1.2.3"}))
    program = package / "bin" / "cli.js"
    program.write_text("#!/bin/sh\n")
    link = tmp_path / "node_modules" / ".bin" / "cli"
    link.parent.mkdir()
    link.symlink_to(program)
    assert installed_version(str(link)) == "1.2.3"
    assert installed_version(str(tmp_path / "nowhere")) is None
    assert untested_note("cli", "1.2.3", ("1.2.3",)) is None
    assert untested_note("cli", None, ("1.2.3",)) is None
    assert untested_note("cli", "1.0.0", ("1.2.3",)) == "cli 1.0.0 is not a version roost was tested with (1.2.3); if it fails, its error says why"


def hosts_with_tables():
    from roost_plugins.claude.host import ClaudeHost
    from roost_plugins.codex.host import CodexHost
    from roost_plugins.gemini.host import GeminiHost
    from roost_plugins.opencode.host import OpenCodeHost
    from roost_plugins.pi.host import PiHost
    from roost_plugins.qwen.host import QwenHost

    return {"claude": ClaudeHost, "pi": PiHost, "codex": CodexHost, "gemini": GeminiHost, "opencode": OpenCodeHost, "qwen": QwenHost}


@pytest.mark.parametrize("cli", sorted(hosts_with_tables()))
def test_each_hosts_tested_versions_hold_the_version_its_tests_pin(cli):
    lock = json.loads((TESTS / cli / "package-lock.json").read_text())
    [package] = lock["packages"][""]["dependencies"]
    pinned = lock["packages"][f"node_modules/{package}"]["version"]
    assert pinned in hosts_with_tables()[cli].tested_versions
