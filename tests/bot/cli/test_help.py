"""The help a newcomer reads: every `--help` names what it needs, with no stray markup."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli.main import main
from bot.core.settings import VARIABLES

REPO = Path(__file__).resolve().parents[3]


def help_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    return " ".join(out.split())  # argparse wraps lines where it likes


def test_setup_help_has_no_literal_double_percent(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of(capsys, "setup")
    assert "The bot waits 10% less than the hook timeout" in text
    assert "%%" not in text
    for agent in ("claude-code", "codex"):
        assert "%%" not in help_of(capsys, "setup", agent)


def test_on_timeout_points_at_a_help_that_explains_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert "see `approval-bot hook --help`" in help_of(capsys, "setup", "claude-code")
    for argv in (("hook",), ("hook", "claude-code"), ("hook", "codex")):
        text = help_of(capsys, *argv)
        for mode, says in (
            ("deny", "the call is denied and the request withdrawn"),
            ("ask", "the agent's own approval flow decides"),
            ("defer", "the call is deferred and the request stays pending in Slack"),
        ):
            assert f"{mode} " in text and says in text, (argv, mode)


def test_serve_help_says_it_is_configured_by_environment_variables(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = help_of(capsys, "serve")
    assert "environment variables configure it" in text
    for name in (*VARIABLES, "APPROVALS_ENV_FILE"):
        assert name in text, name
    assert "export APPROVALS_URL=… APPROVALS_TOKEN=…" in text


def test_building_the_parser_loads_no_settings() -> None:
    """The variable list is read only for `serve --help`: other commands' parsing stays light."""
    code = (
        "import sys; from bot.cli.main import build_parser; build_parser(); "
        "print('bot.core.settings' in sys.modules, 'pydantic' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["False", "False"], done.stdout + done.stderr
