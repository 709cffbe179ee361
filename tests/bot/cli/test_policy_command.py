"""`approval-bot policy explain` and `policy check`'s warnings, through the real entry point."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.cli.main import main
from bot.core.settings import VARIABLES

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "tests" / "approvals" / "internal" / "shell" / "example_policy.yaml"


@pytest.fixture(autouse=True)
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*VARIABLES, "APPROVALS_ENV_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("APPROVALS_DEFAULT_CHANNEL", "C0APPROVALS")


def explain(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["policy", "explain", *args]) == 0
    return capsys.readouterr().out


def test_explain_shows_the_parse_the_commands_the_risks_the_rules_and_the_outcome(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = explain(
        capsys,
        "--policy",
        str(EXAMPLE),
        "--cwd",
        "/srv/app",
        "CI=1 timeout 5 env rm -fr build && git -C /repo push origin main",
    )
    assert "parse:\n  1. CI=1 timeout 5 env rm -fr build   [top level]\n" in out
    assert "  1. rm -f -r build   (via timeout 5, env; with CI=1)\n" in out
    assert "     not read-only: rm is not on the read-only list\n" in out
    assert "  2. git -C /repo push origin main\n" in out
    assert "  recursive_delete: rm -r of build\n" in out
    assert "  push_to_protected: git push to main\n" in out
    assert "  no-recursive-delete: deny (simple commands 1)\n" in out
    assert "  ask-before-push: ask (simple commands 2)\n" in out
    assert out.endswith("outcome: deny\n  recursive deletes are not allowed\n")


def test_explain_of_a_read_only_command_allows(capsys: pytest.CaptureFixture[str]) -> None:
    out = explain(capsys, "--policy", str(EXAMPLE), "git status && ls -la | head")
    assert "  read-only-shell: allow (simple commands 1, 2, 3)\n" in out
    assert "risks: none\n" in out
    assert out.endswith("outcome: allow\n")


def test_explain_of_an_unanalysable_command_asks(capsys: pytest.CaptureFixture[str]) -> None:
    out = explain(capsys, "--policy", str(EXAMPLE), 'ls && eval "$CMD"')
    assert "UNANALYSABLE: eval runs a string only known when it runs" in out
    assert "  ask-before-push: ask (the command is unanalysable)\n" in out
    assert "outcome: ask on route default\n" in out


def test_explain_without_a_policy_file_uses_the_default_policy(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = explain(capsys, "ls")
    assert "policy:  the default policy (no policy file)\n" in out
    assert "rules matched: none\n" in out and "outcome: ask on route default\n" in out


def test_explain_with_a_broken_policy_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - name: x\n    match: {command: {flags: [r]}}\n    action: deny\n")
    assert main(["policy", "explain", "--policy", str(bad), "ls"]) == 1
    assert "is not an option" in capsys.readouterr().err


def test_check_warns_about_rules_that_can_never_match(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "rules:\n"
        "  - name: sudo-rule\n    match: {command: {program: sudo}}\n    action: deny\n"
        "  - name: fine\n    match: {command: {program: rm, flags: [-r]}}\n    action: deny\n"
    )
    assert main(["policy", "check", str(policy)]) == 0
    captured = capsys.readouterr()
    assert "ok — 1 route, 2 rules" in captured.out
    assert f"{policy}: warning: rules[0] (sudo-rule): program 'sudo' never matches" in captured.err
    assert "rules[1]" not in captured.err
