"""The README's command lines stay true: the try-it line installs quietly, every line of
"Using the CLI" is accepted by the real ``roost`` parser, and the error codes it names
exist. (``roost demo`` itself runs in tests/system/test_cli.py.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from roost_core import cli_support, protocol
from roost_core.cli import build_parser

README = Path(__file__).resolve().parents[2] / "README.md"


def sh_blocks(section: str) -> list[str]:
    text = README.read_text()
    body = re.search(rf"^## {re.escape(section)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)[1]
    return re.findall(r"```sh\n(.*?)```", body, re.S)


def test_the_try_it_line_installs_quietly_and_runs_the_demo():
    block = sh_blocks("Try it")[0]
    (line,) = block.strip().splitlines()
    steps = [shlex.split(step) for step in line.split("&&")]
    assert steps[0] == ["python3", "-m", "venv", ".venv"]
    # -q: no pages of pip output before the demo.
    assert steps[1] == [".venv/bin/pip", "install", "-q", "-e", "."]
    assert steps[2] == [".venv/bin/roost", "demo"]
    build_parser().parse_args(steps[2][1:])


def cli_lines() -> list[list[str]]:
    (block,) = sh_blocks("Using the CLI")
    return [shlex.split(line.split("  #")[0])[1:] for line in block.strip().splitlines()]


@pytest.mark.parametrize("argv", cli_lines(), ids=lambda argv: " ".join(argv)[:40])
def test_every_command_line_of_the_readme_parses(argv):
    if argv == ["--version"]:
        # argparse prints the version and exits 0, as git and gh do.
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args(argv)
        assert exited.value.code == 0
        return
    args = build_parser().parse_args(argv)
    assert args.command


def test_the_error_codes_the_readme_names_exist():
    text = README.read_text()
    paragraph = text[text.index("Errors exit 1 with one line") :].split("\n\n")[0]
    named = set(re.findall(r"`([a-z_]+)`", paragraph)) - {"wait"}
    known = {value for key, value in vars(protocol).items() if key.isupper() and isinstance(value, str)}
    known |= {cli_support.TIMEOUT, cli_support.UNAVAILABLE, cli_support.BAD_CONFIG, cli_support.BAD_HOME, cli_support.PLUGIN_ERROR, cli_support.WRITE_FAILED}
    assert named and named <= known, named - known


def test_the_exit_statuses_the_readme_names_are_the_clis():
    text = README.read_text()
    paragraph = text[text.index("Errors exit 1 with one line") :].split("\n\n")[0]
    named = {int(status) for status in re.findall(r"exits? (\d+)", paragraph)}
    statuses = {cli_support.EXIT_ERROR, cli_support.EXIT_USAGE, cli_support.EXIT_TIMEOUT, cli_support.EXIT_INTERRUPTED}
    assert named == statuses, named
