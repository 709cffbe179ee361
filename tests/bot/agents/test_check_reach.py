"""`setup --check` from where the agent runs: the hook's command must start (on PATH), it must
have a bot to ask (APPROVALS_URL + APPROVALS_TOKEN that the bot takes, or REDIS_URL, or a
running serve), and what cannot be verified is "unknown", never "the gate is on"."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from bot.agents.check import Here, check_claude_code
from bot.cli.main import main
from bot.core.settings import VARIABLES
from tests.support.credentials import API_TOKEN

#: The directory with this test run's `approval-bot` (the venv's bin).
BIN = str(Path(sys.executable).parent)
assert (Path(BIN) / "approval-bot").exists(), "the project is installed in this venv"


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A project and a home; HOME and CODEX_HOME in the temporary tree; PATH with this venv's
    bin (approval-bot) and the system's, where neither codex nor claude is."""
    for name in (*VARIABLES, "APPROVALS_ENV_FILE", "CODEX_HOME"):
        monkeypatch.delenv(name, raising=False)
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CODEX_HOME", str(home / ".codex"))
    monkeypatch.setenv("APPROVALS_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PATH", f"{BIN}:/usr/bin:/bin")
    return project, home


def setup(project: Path, agent: str, *argv: str) -> int:
    return main(["setup", agent, *argv, "--project", str(project), "--executable", "approval-bot"])


async def check(project: Path, agent: str = "claude-code") -> int:
    """`setup AGENT --check` on a worker thread (the test's loop serves the bot meanwhile)."""
    return await asyncio.to_thread(main, ["setup", agent, "--check", "--project", str(project)])


async def test_the_gate_is_on_when_the_hook_starts_and_the_bot_takes_the_token(
    dirs: tuple[Path, Path],
    api_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project, _ = dirs
    assert setup(project, "claude-code") == 0
    monkeypatch.setenv("APPROVALS_URL", api_url)
    monkeypatch.setenv("APPROVALS_TOKEN", API_TOKEN)
    capsys.readouterr()
    assert await check(project) == 0
    out = capsys.readouterr().out
    assert f"the hook's command starts {BIN}/approval-bot" in out
    assert f"the hook asks the bot at {api_url}" in out
    assert out.rstrip().endswith("claude-code: the gate is on"), out


async def test_a_hook_command_not_on_path_fails_the_check(
    dirs: tuple[Path, Path],
    api_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The agent could not start `approval-bot hook …` and would run the call: not "on"."""
    project, _ = dirs
    assert setup(project, "claude-code") == 0
    monkeypatch.setenv("APPROVALS_URL", api_url)
    monkeypatch.setenv("APPROVALS_TOKEN", API_TOKEN)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    capsys.readouterr()
    assert await check(project) == 1
    out = capsys.readouterr().out
    assert "`approval-bot` is not on PATH here" in out and "the gate is NOT reliably on" in out
    assert "the gate is on" not in out


async def test_without_a_bot_to_ask_the_check_fails_and_says_what_to_set(
    dirs: tuple[Path, Path],
    api_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project, _ = dirs
    assert setup(project, "claude-code") == 0
    capsys.readouterr()
    # nothing set, no serve running
    assert await check(project) == 1
    out = capsys.readouterr().out
    assert "neither APPROVALS_URL + APPROVALS_TOKEN nor REDIS_URL is set here" in out
    # half of it
    monkeypatch.setenv("APPROVALS_URL", api_url)
    assert await check(project) == 1
    assert "APPROVALS_TOKEN is not set here but APPROVALS_URL is" in capsys.readouterr().out
    # a token the bot refuses
    monkeypatch.setenv("APPROVALS_TOKEN", "not-a-token-of-this-bot")
    assert await check(project) == 1
    assert f"the bot at {api_url} refuses APPROVALS_TOKEN" in capsys.readouterr().out
    # REDIS_URL instead
    monkeypatch.delenv("APPROVALS_URL")
    monkeypatch.delenv("APPROVALS_TOKEN")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    assert await check(project) == 0
    assert "over REDIS_URL" in capsys.readouterr().out


async def test_a_bot_that_does_not_answer_is_unknown_never_on(
    dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project, _ = dirs
    assert setup(project, "claude-code") == 0
    monkeypatch.setenv("APPROVALS_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("APPROVALS_TOKEN", API_TOKEN)
    capsys.readouterr()
    assert await check(project) == 3
    out = capsys.readouterr().out
    assert "???? the bot at http://127.0.0.1:1 (APPROVALS_URL) could not be asked now" in out
    assert out.rstrip().endswith("claude-code: unknown: the gate may be off; what could not "
                                 "be checked is marked ????"), out  # fmt: skip


async def test_codex_setup_and_check_agree_when_codex_is_not_on_path(
    dirs: tuple[Path, Path],
    api_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`setup codex` cannot make the hook trusted without codex (exit 1); the check after it
    cannot see the trust either: "unknown" (exit 3), not "the gate is on"."""
    project, _ = dirs
    monkeypatch.setenv("APPROVALS_URL", api_url)
    monkeypatch.setenv("APPROVALS_TOKEN", API_TOKEN)
    assert setup(project, "codex", "--scope", "user") == 1
    assert "Codex skips this hook until it is trusted" in capsys.readouterr().out
    assert await check(project, "codex") == 3
    out = capsys.readouterr().out
    assert "???? codex is not on PATH, so whether Codex trusts the hook cannot be checked" in out
    assert "the gate is on" not in out and "codex: unknown" in out


def test_claude_code_settings_env_counts_as_the_hooks_environment(dirs: tuple[Path, Path]) -> None:
    """Claude Code sets its settings' `env` for hooks too: a URL and token there are found."""
    project, home = dirs
    settings = project / ".claude" / "settings.json"
    assert setup(project, "claude-code") == 0
    data = json.loads(settings.read_text())
    data["env"] = {"APPROVALS_URL": "http://127.0.0.1:9", "APPROVALS_TOKEN": "from-settings"}
    settings.write_text(json.dumps(data))
    asked: list[tuple[str, str]] = []

    def probe(url: str, token: str) -> str:
        asked.append((url, token))
        return "ok"

    here = Here({"PATH": f"{BIN}:/usr/bin"}, probe=probe)
    report = check_claude_code(project, home, here=here)
    assert asked == [("http://127.0.0.1:9", "from-settings")]
    assert report.verdict == "on", report.render()


def test_a_wrapper_that_starts_approval_bot_some_other_way_is_unknown(
    dirs: tuple[Path, Path],
) -> None:
    project, home = dirs
    assert setup(project, "claude-code") == 0
    settings = project / ".claude" / "settings.json"
    data = json.loads(settings.read_text())
    hook = data["hooks"]["PreToolUse"][0]["hooks"][0]
    hook["command"] = "env approval-bot " + hook["command"].split(" ", 1)[1]
    settings.write_text(json.dumps(data))
    here = Here({"PATH": "/usr/bin:/bin", "REDIS_URL": "redis://127.0.0.1:1/0"})
    report = check_claude_code(project, home, here=here)
    assert report.verdict == "unknown", report.render()
    assert any("through `env`" in text for text in report.unknowns)
