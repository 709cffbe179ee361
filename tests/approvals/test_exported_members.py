"""The public API: `approvals.__all__` is honest (after httpx's tests/test_exported_members.py),
every name resolves from where `approvals` says, and `import approvals` stays cheap."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import approvals

INIT = Path(approvals.__file__)


def type_checking_imports() -> dict[str, str]:
    """name → module of every import under `if TYPE_CHECKING:` in approvals/__init__.py."""
    tree = ast.parse(INIT.read_text())
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module
                for alias in stmt.names:
                    found[alias.asname or alias.name] = stmt.module
    return found


def test_all_is_unique_and_matches_the_imports() -> None:
    # (ruff's RUF022 keeps `__all__` sorted)
    assert len(approvals.__all__) == len(set(approvals.__all__))
    assert type_checking_imports() == approvals._SOURCES
    assert set(approvals._SOURCES) == set(approvals.__all__)


def test_every_exported_name_resolves_to_its_definition() -> None:
    for name in approvals.__all__:
        value = getattr(approvals, name)
        source = approvals._SOURCES[name]
        assert value is getattr(sys.modules[source], name), name
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__ == source, f"{name} is defined in {value.__module__}"
    assert sorted(dir(approvals)) == sorted(set(dir(approvals)) | set(approvals.__all__))


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        approvals.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as e:
        assert "NoSuchThing" in str(e)
    else:
        raise AssertionError("approvals.NoSuchThing resolved")


def test_import_approvals_loads_no_heavy_dependency() -> None:
    heavy = ("redis", "aiohttp", "pydantic", "slack_sdk", "slack_bolt", "yaml")
    code = f"import sys, approvals\nprint(','.join(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""


def test_every_public_name_comes_from_a_public_module() -> None:
    """What `import approvals` promises is defined outside `approvals._internal`."""
    for name, source in approvals._SOURCES.items():
        assert "._internal" not in source and not source.split(".")[-1].startswith("_"), name


def test_names_of_0_1_still_resolve_with_a_deprecation_warning() -> None:
    import warnings

    from approvals.integrations.slack_review import SlackReviewPlugin
    from approvals.review import ReviewPlugin, run_review

    expected = {
        "Hook": ReviewPlugin,
        "run_hook": run_review,
        "SlackApprovalHook": SlackReviewPlugin,
    }
    for old, new in expected.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert getattr(approvals, old) is new
        assert [w.category for w in caught] == [DeprecationWarning], old
        assert old not in approvals.__all__
    for old in approvals._RENAMED:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            assert getattr(approvals, old) is not None
