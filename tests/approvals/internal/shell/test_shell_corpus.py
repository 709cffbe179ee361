"""The evasion and benign corpora under the example policy: every evasion is
denied or asked as its entry says (never allowed), every everyday read-only command is
allowed at once, every everyday writing command is asked. The confusion table is printed by
`python -m bench.bench_shell --corpus`."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from approvals._internal.policy import Policy
from approvals._internal.policy_file import load_policy, read_policy_data
from approvals.models import ApprovalEvent

HERE = Path(__file__).parent
ROOT = HERE.parents[3]
CWD = "/srv/app"


def example_policy() -> Policy:
    return load_policy(HERE / "example_policy.yaml")


def evasions() -> list[dict[str, Any]]:
    cases = yaml.safe_load((HERE / "evasions.yaml").read_text())
    assert isinstance(cases, list)
    return cases


def lines(name: str) -> list[str]:
    text = (HERE / name).read_text()
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def event(case: str | list[str]) -> ApprovalEvent:
    if isinstance(case, str):
        return ApprovalEvent(kind="command", tool_name="Bash", command=case, cwd=CWD)
    return ApprovalEvent(kind="command", tool_name="Bash", arguments={"command": case}, cwd=CWD)


POLICY = example_policy()


def test_the_corpora_are_as_large_as_the_issue_asks() -> None:
    cases = evasions()
    assert len(cases) >= 150
    assert len(lines("benign_read_only.txt")) >= 300
    assert len(lines("benign_writes.txt")) >= 100
    assert {c["expect"] for c in cases} == {"deny", "ask"}, "an evasion is never allowed"
    categories = Counter(c["cat"] for c in cases)
    families = (
        "chaining", "flags", "wrappers", "path", "assignments", "git-options", "sh-c",
        "xargs-find", "structure", "substitution", "quoting", "ansi-c", "continuation",
        "heredoc", "expansion", "pipe-to-shell", "eval", "argv",
    )  # fmt: skip
    for family in families:
        assert categories[family] >= 1, family


@pytest.mark.parametrize(
    "case", evasions(), ids=lambda c: f"{c['cat']}:{c.get('cmd') or c.get('argv')}"[:80]
)
def test_evasion(case: dict[str, Any]) -> None:
    decision = POLICY.evaluate(event(case.get("cmd") or case["argv"]))
    assert decision.action == case["expect"], decision.matched
    if case["expect"] == "deny":
        assert {"no-recursive-delete", "no-pipe-to-shell"} & set(decision.winners)


@pytest.mark.parametrize("command", lines("benign_read_only.txt"))
def test_everyday_read_only_command_is_allowed(command: str) -> None:
    decision = POLICY.evaluate(event(command))
    assert decision.action == "allow", decision.matched
    assert decision.winners == ("read-only-shell",)


@pytest.mark.parametrize("command", lines("benign_writes.txt"))
def test_everyday_writing_command_is_asked(command: str) -> None:
    decision = POLICY.evaluate(event(command))
    assert decision.action == "ask", decision.matched
    assert "read-only-shell" not in decision.matched


def test_the_shipped_example_policy_holds_the_issue_example() -> None:
    """config/policy.example.yaml shows the new keys with exactly these four rules."""
    shipped = {r["name"]: r for r in read_policy_data(ROOT / "config/policy.example.yaml")["rules"]}
    ours = yaml.safe_load((HERE / "example_policy.yaml").read_text())["rules"]
    for rule in ours:
        assert shipped.get(rule["name"]) == rule
