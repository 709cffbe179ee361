"""The dependency locks (`requirements/`): hash-checked, consistent with `pyproject.toml`
and with each other, and the ones the scripts and the image install. `scripts/lock --check`
(in `.ci/run`) re-resolves them; these checks need no network."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def pins(name: str) -> dict[str, tuple[str, list[str]]]:
    """name → (version, hashes) of one lock, each requirement with its continuation lines."""
    text = (ROOT / "requirements" / name).read_text()
    found: dict[str, tuple[str, list[str]]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        first = block.splitlines()[0]
        if not first or first.startswith("#"):
            continue
        match = re.match(r"([A-Za-z0-9_.\-\[\]]+)==([^\s;\\]+)", first)
        assert match, f"{name}: not a pin: {first!r}"
        package = canonicalize_name(match[1].split("[")[0])
        found[package] = (match[2], re.findall(r"--hash=sha256:([0-9a-f]{64})", block))
    return found


SERVE = pins("serve.txt")
DEV = pins("dev.txt")


def requirements(group: str | None) -> list[Requirement]:
    raw = (
        PYPROJECT["project"]["dependencies"]
        if group is None
        else (PYPROJECT["project"]["optional-dependencies"][group])
    )
    return [Requirement(line) for line in raw]


def test_every_pin_has_hashes() -> None:
    for lock in (SERVE, DEV):
        for package, (_, hashes) in lock.items():
            assert hashes, f"{package} has no hash"


def test_the_serve_lock_pins_exactly_the_runtime_dependencies_and_their_own() -> None:
    direct = {canonicalize_name(r.name) for r in requirements(None)}
    assert direct <= set(SERVE)
    assert "setuptools" in SERVE, "the project's build backend is locked too (build.in)"
    for dev_only in ("pytest", "mypy", "ruff", "langgraph", "openai-agents", "temporalio"):
        assert dev_only not in SERVE


def test_the_dev_lock_is_a_superset_of_serve_at_the_same_versions() -> None:
    for package, (version, _) in SERVE.items():
        assert package in DEV, package
        assert DEV[package][0] == version, f"{package}: serve {version}, dev {DEV[package][0]}"
    assert {canonicalize_name(r.name) for r in requirements("dev")} <= set(DEV)


def test_each_pin_is_inside_the_range_pyproject_allows() -> None:
    for group, lock in ((None, SERVE), ("dev", DEV)):
        for req in requirements(group):
            version = lock[canonicalize_name(req.name)][0]
            assert req.specifier.contains(version, prereleases=True), f"{req}: locked {version}"


def test_the_scripts_and_the_image_install_from_the_locks() -> None:
    bootstrap = (ROOT / "scripts" / "bootstrap").read_text()
    assert "--require-hashes" in bootstrap and "requirements/$profile.txt" in bootstrap
    assert 'bootstrap" --serve' in (ROOT / "scripts" / "serve").read_text()
    assert "scripts/bootstrap --dev" in (ROOT / "scripts" / "test").read_text()
    assert "scripts/lock --check" in (ROOT / ".ci" / "run").read_text()
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert dockerfile.count("--require-hashes") == 2
    assert "requirements/serve.txt" in dockerfile
