"""The distribution: the wheel installs exactly `approvals` and `bot`, with the files read at run
time (the Lua scripts, `py.typed`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from approvals._internal.store.store import SCRIPT_NAMES

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_holds_exactly_approvals_and_bot(tmp_path: Path) -> None:
    # Build from a copy, so no stale build/ directory of the checkout can add files.
    source = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    for name in ("approvals", "bot", "config"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    out = tmp_path / "dist"
    build = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", str(source), "-w", str(out)),
            *("--no-deps", "--no-build-isolation", "--disable-pip-version-check", "--quiet"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert build.returncode == 0, build.stderr
    [wheel] = out.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()

    top = {name.split("/")[0] for name in names if ".dist-info/" not in name}
    assert top == {"approvals", "bot"}
    for script in SCRIPT_NAMES:
        assert f"approvals/_internal/store/lua/{script}.lua" in names
    assert "approvals/py.typed" in names
    assert "bot/core/settings.py" in names
