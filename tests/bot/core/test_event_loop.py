"""`approval-bot serve` runs on uvloop where it is installed (a dependency on Linux)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from bot.cli import serve as cli


def test_serve_runs_on_uvloop() -> None:
    import uvloop

    factory = cli.event_loop_factory()
    assert factory is uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        assert isinstance(runner.get_loop(), uvloop.Loop)


def test_without_uvloop_serve_uses_asyncio(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import fails as if not installed
    assert cli.event_loop_factory() is None
