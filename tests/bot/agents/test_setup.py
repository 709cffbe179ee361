"""`approval-bot setup claude-code|codex`: merge, idempotence, backup, dry-run diff, the timeout
rule, and the `--check` findings (real files in a temporary project and home)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.agents import check as setup_check
from bot.agents.check import check_claude_code, check_codex
from bot.agents.settings_files import (
    ON_TIMEOUT_CHOICES,
    HookSpec,
    SetupError,
    bot_wait,
    consistent,
    hook_refs,
    merge,
    plan,
)
from bot.cli.main import main
from bot.core.settings import VARIABLES

OTHER_HOOK = {"type": "command", "command": "./lint.sh", "timeout": 30}


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A project and a home directory; HOME and CODEX_HOME point into the temporary tree."""
    for name in (*VARIABLES, "APPROVALS_ENV_FILE", "CODEX_HOME"):
        monkeypatch.delenv(name, raising=False)
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CODEX_HOME", str(home / ".codex"))
    return project, home


def setup(project: Path, *argv: str) -> int:
    return main(["setup", *argv, "--project", str(project), "--executable", "approval-bot"])


def ours(data: dict[str, Any], agent: Any = "claude-code") -> list[Any]:
    return [ref for ref in hook_refs(Path("x"), data, agent) if ref.ours]


def command_timeout(command: str) -> float:
    words = shlex.split(command)
    return float(words[words.index("--timeout") + 1])


# -- writing ------------------------------------------------------------------------------------


def test_writes_a_new_project_settings_file(
    dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    project, _ = dirs
    assert setup(project, "claude-code") == 0
    path = project / ".claude" / "settings.json"
    data = json.loads(path.read_text())
    assert data == {
        "hooks": {
            "PreToolUse": [
                {
                    "matcher": "Bash|Edit|Write|MultiEdit|NotebookEdit|mcp__.*",
                    "hooks": [
                        {
                            "type": "command",
                            "command": "approval-bot hook claude-code --timeout 570 "
                            "--on-timeout deny",
                            "timeout": 600,
                        }
                    ],
                }
            ]
        }
    }
    out = capsys.readouterr().out
    assert "+++ " + str(path) in out and "--- /dev/null" in out
    assert list(path.parent.glob("*.bak")) == []  # nothing to back up


def test_merge_keeps_other_settings_and_hooks_and_backs_up(
    dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    project, _ = dirs
    path = project / ".claude" / "settings.local.json"
    path.parent.mkdir()
    before: dict[str, Any] = {
        "permissions": {"allow": ["Read"]},
        "hooks": {
            "PreToolUse": [{"matcher": "Bash", "hooks": [OTHER_HOOK]}],
            "PostToolUse": [{"matcher": "Edit", "hooks": [OTHER_HOOK]}],
        },
    }
    original = json.dumps(before)
    path.write_text(original)
    assert setup(project, "claude-code", "--scope", "local", "--timeout", "120") == 0
    after = json.loads(path.read_text())
    assert after["permissions"] == before["permissions"]
    assert after["hooks"]["PostToolUse"] == before["hooks"]["PostToolUse"]
    assert after["hooks"]["PreToolUse"][0] == before["hooks"]["PreToolUse"][0]
    (mine,) = ours(after)
    assert mine.agent_timeout == 120 and mine.wait == 108
    (backup,) = path.parent.glob("settings.local.json.*.bak")
    assert backup.read_text() == original
    out = capsys.readouterr().out
    assert f"backup: {backup}" in out and '+            "timeout": 120' in out


def test_second_run_changes_nothing(
    dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    project, _ = dirs
    assert setup(project, "claude-code") == 0
    path = project / ".claude" / "settings.json"
    first = path.read_bytes()
    capsys.readouterr()
    assert setup(project, "claude-code") == 0
    assert path.read_bytes() == first
    assert "already up to date" in capsys.readouterr().out
    assert list(path.parent.glob("*.bak")) == []


def test_dry_run_prints_the_diff_and_writes_nothing(
    dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    project, _ = dirs
    path = project / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text('{"model": "opus"}\n')
    code = setup(project, "claude-code", "--dry-run", "--type", "http", "--url", "http://b:3000")
    assert code == 0
    assert path.read_text() == '{"model": "opus"}\n'
    out = capsys.readouterr().out
    assert '-{"model": "opus"}' in out
    url = "http://b:3000/hooks/claude-code?timeout=570&on_timeout=deny"
    assert f'+            "url": "{url}",' in out
    assert "(dry run: nothing written)" in out
    assert list(path.parent.glob("*.bak")) == []


def test_an_existing_hook_is_updated_in_place_and_moved_between_events() -> None:
    stale = {"type": "command", "command": "approval-bot hook claude-code --timeout 700"}
    data = {
        "hooks": {
            "PermissionRequest": [{"matcher": "Bash", "hooks": [stale]}],
            "PreToolUse": [{"matcher": "Bash", "hooks": [OTHER_HOOK]}],
        }
    }
    merged = merge(data, HookSpec("claude-code", executable="approval-bot"))
    assert "PermissionRequest" not in merged["hooks"]  # moved, not duplicated
    (mine,) = ours(merged)
    assert (mine.event, mine.wait, mine.agent_timeout) == ("PreToolUse", 570, 600)
    assert merged["hooks"]["PreToolUse"][0] == {"matcher": "Bash", "hooks": [OTHER_HOOK]}
    # same event, shared group with the same matcher: replaced where it stood
    shared = {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [stale, OTHER_HOOK]}]}}
    merged = merge(shared, HookSpec("claude-code", matcher="Bash", executable="/x/approval-bot"))
    group = merged["hooks"]["PreToolUse"][0]["hooks"]
    assert group[1] == OTHER_HOOK and "/x/approval-bot hook claude-code" in group[0]["command"]
    assert data["hooks"]["PermissionRequest"][0]["hooks"] == [stale]  # input not mutated


def test_an_http_hook_is_replaced_by_a_command_hook() -> None:
    http = HookSpec("claude-code", hook_type="http", url="http://127.0.0.1:3000/")
    data = merge({}, http)
    handler = data["hooks"]["PreToolUse"][0]["hooks"][0]
    assert handler == {
        "type": "http",
        "url": "http://127.0.0.1:3000/hooks/claude-code?timeout=570&on_timeout=deny",
        "headers": {"Authorization": "Bearer $APPROVALS_TOKEN"},
        "allowedEnvVars": ["APPROVALS_TOKEN"],
        "timeout": 600,
    }
    data = merge(data, HookSpec("claude-code"))
    (mine,) = ours(data)
    assert mine.kind == "command"


def test_bad_input_writes_nothing(
    dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    project, _ = dirs
    path = project / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text("{not json")
    assert setup(project, "claude-code") == 2
    assert path.read_text() == "{not json"
    assert "not valid JSON" in capsys.readouterr().err
    path.write_text('{"hooks": []}')
    assert setup(project, "claude-code") == 2
    assert setup(project, "claude-code", "--timeout", "9") == 2  # too short to answer first
    assert path.read_text() == '{"hooks": []}'
    assert setup(project, "claude-code", "--type", "http") == 2  # no URL anywhere
    assert list(path.parent.glob("*.bak")) == []


def test_codex_user_scope_writes_codex_home_hooks_json(
    dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    project, home = dirs
    code = setup(project, "codex", "--timeout", "300", "--codex", str(home / "no-codex"))
    assert code == 1  # written, but Codex cannot be asked to trust it: the gate is not on yet
    data = json.loads((home / ".codex" / "hooks.json").read_text())
    (mine,) = ours(data, "codex")
    assert (mine.event, mine.wait, mine.agent_timeout, mine.matcher) == (
        "PreToolUse",
        270,
        300,
        "Bash|apply_patch|mcp__.*",
    )
    assert mine.handler["statusMessage"] == "Waiting for approval in Slack"
    out = capsys.readouterr().out
    assert "codex not found" in out and "/hooks" in out


def test_setup_offers_every_on_timeout_the_hook_knows() -> None:
    from approvals.integrations.coding_agents import ON_TIMEOUT

    assert ON_TIMEOUT_CHOICES == ON_TIMEOUT


# -- the timeout rule ---------------------------------------------------------------------------


@given(st.floats(min_value=10, max_value=86_400, allow_nan=False))
def test_the_bot_always_answers_comfortably_before_the_agent(agent_timeout: float) -> None:
    wait = bot_wait(agent_timeout)
    assert 5 <= agent_timeout - wait < 30.1  # 10 %, 5 s to 30 s, rounded down to 0.1 s
    assert consistent(wait, agent_timeout)
    handler = HookSpec("codex", timeout=agent_timeout).handler()
    assert command_timeout(handler["command"]) <= handler["timeout"] - 5


@given(st.floats(max_value=9.999, allow_nan=False))
def test_a_hook_timeout_too_short_to_answer_first_is_refused(agent_timeout: float) -> None:
    with pytest.raises(SetupError, match="too short"):
        bot_wait(agent_timeout)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)
@given(
    st.lists(
        st.sampled_from(
            [
                OTHER_HOOK,
                {"type": "http", "url": "https://example.com/other"},
                {"type": "command", "command": "approval-bot hook claude-code --timeout 9999"},
                {"type": "http", "url": "http://bot/hooks/claude-code"},
                {"type": "command", "command": "'unbalanced"},
                "not a handler",
            ]
        ),
        max_size=5,
    ),
    st.sampled_from(["PreToolUse", "PermissionRequest"]),
    st.sampled_from(["Bash", "Bash|Edit|Write|MultiEdit|NotebookEdit|mcp__.*", None]),
)
def test_merge_keeps_every_other_hook_and_leaves_exactly_one_of_ours(
    handlers: list[Any], event: str, matcher: str | None
) -> None:
    group: dict[str, Any] = {"hooks": handlers}
    if matcher:
        group["matcher"] = matcher
    data = {"hooks": {event: [group], "Stop": [{"hooks": [OTHER_HOOK]}]}, "x": 1}
    spec = HookSpec("claude-code", executable="approval-bot")
    merged = merge(data, spec)
    (mine,) = ours(merged)
    assert mine.event == "PreToolUse" and consistent(mine.wait or 0, mine.agent_timeout or 0)
    others_before = [h for h in handlers if h not in [r.handler for r in ours(data)]]
    others_after = [
        h
        for groups in merged["hooks"].values()
        for g in groups
        for h in g["hooks"]
        if h != mine.handler
    ]
    assert sorted(map(json.dumps, [*others_before, OTHER_HOOK])) == sorted(
        map(json.dumps, others_after)
    )
    assert merge(merged, spec) == merged  # idempotent
    assert merged["x"] == 1


# -- --check ------------------------------------------------------------------------------------


def write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def entry(event: str, handler: dict[str, Any], matcher: str = "Bash") -> dict[str, Any]:
    return {"hooks": {event: [{"matcher": matcher, "hooks": [handler]}]}}


def test_check_flags_a_missing_hook(dirs: tuple[Path, Path]) -> None:
    project, home = dirs
    report = check_claude_code(project, home)
    assert not report.ok and "no approval-bot hook" in report.errors[0]
    report = check_codex(project, home / ".codex", use_codex=False)
    assert not report.ok and "no approval-bot hook" in report.errors[0]


def test_check_passes_what_setup_wrote(
    dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    project, home = dirs
    assert setup(project, "claude-code", "--scope", "user") == 0
    report = check_claude_code(project, home)
    assert report.ok and report.warnings == [] and report.verdict == "on"
    # `setup --check` also needs the hook on PATH and a bot: tests/bot/agents/test_check_reach.py


CLAUDE_FINDINGS = [
    (  # the bot outwaits the hook: Claude Code kills it and runs the call
        {"type": "command", "command": "approval-bot hook claude-code --timeout 60", "timeout": 3},
        "error",
        "timeouts inconsistent",
    ),
    (  # no --timeout: the flag's default against Claude Code's 600 s default
        {"type": "command", "command": "approval-bot hook claude-code", "timeout": 30},
        "error",
        "--timeout not given",
    ),
    (
        {"type": "command", "command": "approval-bot hook claude-code --timeout 58", "timeout": 60},
        "warning",
        "a slow start can lose the race",
    ),
    (
        {"type": "http", "url": "http://b/hooks/claude-code?timeout=50", "timeout": 60},
        "warning",
        "an http hook fails open",
    ),
    (
        {
            "type": "command",
            "command": "approval-bot hook claude-code --timeout 50 --on-timeout ask",
            "timeout": 60,
        },
        "warning",
        "asks its user instead",
    ),
    (
        {
            "type": "command",
            "command": "approval-bot hook claude-code --timeout 50 --on-timeout defer",
            "timeout": 60,
        },
        "warning",
        "only headless `claude -p` honours",
    ),
]


@pytest.mark.parametrize(("handler", "level", "text"), CLAUDE_FINDINGS)
def test_check_claude_code_findings(
    dirs: tuple[Path, Path], handler: dict[str, Any], level: str, text: str
) -> None:
    project, home = dirs
    write(project / ".claude" / "settings.json", entry("PreToolUse", handler))
    report = check_claude_code(project, home)
    found = report.errors if level == "error" else report.warnings
    assert any(text in line for line in found), report.render()
    assert report.ok == (level != "error")


@pytest.mark.parametrize(
    ("version", "level", "text"),
    [
        ((2, 1, 197), "warning", "ignored by Claude Code 2.1.197 (it needs 2.1.295 or later)"),
        (None, "warning", "`claude` is not on PATH"),
        ((2, 1, 295), "ok", "onFailure 'block' (Claude Code 2.1.295+)"),
        ((2, 2, 0), "ok", "onFailure 'block'"),
    ],
)
def test_check_on_failure_depends_on_the_claude_code_version(
    dirs: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    version: tuple[int, ...] | None,
    level: str,
    text: str,
) -> None:
    project, home = dirs
    monkeypatch.setattr(setup_check, "claude_version", lambda claude=None: version)
    assert setup(project, "claude-code", "--on-failure-block") == 0
    (mine,) = ours(json.loads((project / ".claude" / "settings.json").read_text()))
    assert mine.handler["onFailure"] == "block"
    report = check_claude_code(project, home)
    assert report.ok
    assert any(f.level == level and text in f.text for f in report.findings), report.render()


def test_check_claude_code_gate_shape_findings(dirs: tuple[Path, Path]) -> None:
    project, home = dirs
    command = "approval-bot hook claude-code --timeout 50"
    good = {"type": "command", "command": command, "timeout": 60}
    write(project / ".claude" / "settings.json", entry("PermissionRequest", good, matcher="Edit"))
    write(home / ".claude" / "settings.json", {"disableAllHooks": True})
    report = check_claude_code(project, home)
    assert any("disableAllHooks" in e for e in report.errors)
    assert any("never runs under `claude -p`" in w for w in report.warnings)
    assert any("does not cover Bash" in w for w in report.warnings)


def test_check_codex_project_trust_and_timeouts(dirs: tuple[Path, Path]) -> None:
    project, home = dirs
    codex_home = home / ".codex"
    handler = {"type": "command", "command": "approval-bot hook codex --timeout 60", "timeout": 3}
    write(project / ".codex" / "hooks.json", entry("PreToolUse", handler))
    report = check_codex(project, codex_home, use_codex=False)
    assert any("the project is not trusted" in e for e in report.errors)
    assert any("timeouts inconsistent" in e and "Codex gives up" in e for e in report.errors)
    codex_home.mkdir(exist_ok=True)
    (codex_home / "config.toml").write_text(f'[projects."{project}"]\ntrust_level = "trusted"\n')
    handler = {"type": "command", "command": "approval-bot hook codex --timeout 54", "timeout": 60}
    write(project / ".codex" / "hooks.json", entry("PreToolUse", handler))
    report = check_codex(project, codex_home, use_codex=False)
    assert report.ok, report.render()


def test_check_codex_says_when_trust_cannot_be_checked(dirs: tuple[Path, Path]) -> None:
    project, home = dirs
    handler = {"type": "command", "command": "approval-bot hook codex --timeout 54", "timeout": 60}
    write(home / ".codex" / "hooks.json", entry("PreToolUse", handler))
    report = check_codex(project, home / ".codex", codex=str(home / "missing-codex"))
    assert any("whether Codex trusts the hook cannot be checked" in w for w in report.unknowns)
    assert report.verdict == "unknown", "never 'on' when the trust could not be checked"


def test_plan_of_an_unchanged_file_is_byte_identical(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    spec = HookSpec("claude-code", executable="approval-bot")
    path.write_text(json.dumps(merge({"a": 1}, spec)))  # compact, not how setup renders
    change = plan(path, spec)
    assert not change.changed and change.diff() == ""
