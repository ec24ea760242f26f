"""scripts/lint.sh, the step scripts/test.sh runs first: ruff and mypy --strict with the
project's own configuration, a one-line OK when clean, a non-zero exit on any finding of
either. Run on a small copy of the project (its pyproject.toml, the script, a package of
each name) with this .venv, so a finding can be planted without touching the tree."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def small_project(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copy(ROOT / "scripts" / "lint.sh", tmp_path / "scripts" / "lint.sh")
    (tmp_path / ".venv").symlink_to(sys.prefix)
    for package in ("roost_core", "roost_plugins"):
        (tmp_path / "src" / package).mkdir(parents=True)
        (tmp_path / "src" / package / "__init__.py").write_text(f'"""{package}."""\n')
    return tmp_path


def lint(project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(project / "scripts" / "lint.sh")], capture_output=True, text=True, timeout=120)


def test_a_clean_tree_passes_with_one_ok_line(tmp_path):
    done = lint(small_project(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines() == ["scripts/lint.sh: OK (ruff, mypy --strict)"]


def test_a_finding_of_either_tool_fails_the_step(tmp_path):
    project = small_project(tmp_path)
    (project / "src" / "roost_core" / "unused.py").write_text('"""A module."""\n\nimport os\n')
    (project / "src" / "roost_plugins" / "loose.py").write_text('"""A module."""\n\n\ndef half(x):\n    return x / 2\n')
    done = lint(project)
    assert done.returncode != 0
    assert "F401" in done.stdout and "unused.py" in done.stdout
    assert "loose.py:4: error: Function is missing a type annotation" in done.stdout
    assert "ruff exited 1, mypy exited 1" in done.stderr
    assert "OK" not in done.stdout
