"""Policy rules on the parsed command: `match.command` and `match.risks`, folded by action
(allow: every simple command; ask, deny: any), unanalysable commands, validation, the
warnings of `policy check`, and the old glob/regex fields still working beside them."""

from __future__ import annotations

from typing import Any

import pytest

from approvals._internal.policy import Policy
from approvals._internal.policy_file import PolicyError, parse_policy, rule_warnings
from approvals._internal.shell import view
from approvals.models import ApprovalEvent


def policy(*rules: dict[str, Any]) -> Policy:
    data = {"routes": {"default": {"channel": "C0APPROVALS"}}, "rules": list(rules)}
    return parse_policy(data, source="test.yaml")


def bash(command: str, **kw: Any) -> ApprovalEvent:
    return ApprovalEvent(kind="command", tool_name="Bash", command=command, **kw)


def rule(action: str, **match: Any) -> dict[str, Any]:
    return {"name": f"r-{action}", "match": match, "action": action}


def test_allow_needs_every_simple_command_ask_and_deny_any() -> None:
    git = {"program": "git"}
    allow = policy(rule("allow", command=git))
    assert allow.evaluate(bash("git status && git log")).action == "allow"
    assert allow.evaluate(bash("git status && ls")).matched == ()
    ask = policy(rule("ask", command=git), rule("allow", command={"read_only": True}))
    assert ask.evaluate(bash("ls && git log")).action == "ask"
    deny = policy(rule("deny", command={"program": "rm"}))
    assert deny.evaluate(bash("ls; rm x")).action == "deny"
    assert deny.evaluate(bash("ls")).matched == ()


def test_unanalysable_is_never_allowed_and_always_asked() -> None:
    p = policy(
        rule("allow", command={"read_only": True}),
        rule("ask", command={"program": "kubectl"}),
    )
    for command in ("ls && $x", "eval ls", "ls | sh", "source x", "ls && (", "", "echo $(", "bash"):
        decision = p.evaluate(bash(command))
        assert decision.action == "ask", command
        assert decision.matched == ("r-ask",), command


def test_deny_applies_to_what_was_identified_in_an_unanalysable_command() -> None:
    p = policy(rule("deny", command={"program": "rm"}), rule("ask", risks=["force_push"]))
    decision = p.evaluate(bash("rm -rf x; $y"))
    assert decision.action == "deny"
    assert p.evaluate(bash("$y rm -rf x")).action == "ask"


def test_read_only_false_matches_writes() -> None:
    p = policy(rule("ask", command={"read_only": False}), rule("allow", tool="Bash"))
    assert p.evaluate(bash("ls; touch x")).action == "ask"
    assert p.evaluate(bash("ls")).action == "allow"


def test_subcommand_flags_and_program_lists() -> None:
    p = policy(
        {
            "name": "force",
            "match": {"command": {"program": ["git"], "subcommand": "push", "flags": "--force"}},
            "action": "deny",
        },
        {
            "name": "npm-install",
            "match": {"command": {"program": ["npm", "pnpm"], "subcommand": ["install"]}},
            "action": "deny",
        },
        {"name": "rf", "match": {"command": {"program": "rm", "flags": ["-rf"]}}, "action": "deny"},
    )
    assert p.evaluate(bash("git -C /r push -f")).winners == ("force",)
    assert p.evaluate(bash("git push --force-with-lease")).action == "ask"
    assert p.evaluate(bash("npm i x")).winners == ("npm-install",)
    assert p.evaluate(bash("rm --force --recursive x")).winners == ("rf",)
    assert p.evaluate(bash("rm -r x")).action == "ask"


def test_command_rules_only_match_shell_commands() -> None:
    p = policy(rule("deny", command={"program": "rm"}), rule("ask", risks=["publish"]))
    read = ApprovalEvent(tool_name="Read", arguments={"command": "rm -rf /"})
    assert p.evaluate(read).matched == ()
    codex = ApprovalEvent(tool_name="shell", arguments={"command": ["rm", "-rf", "/"]})
    assert p.evaluate(codex).action == "deny"
    exec_command = ApprovalEvent(tool_name="exec_command", arguments={"command": "npm publish"})
    assert p.evaluate(exec_command).matched == ("r-ask",)


def test_other_match_fields_still_apply_beside_command() -> None:
    p = policy(
        {"name": "codex-rm", "match": {"agent": "codex", "command": {"program": "rm"}},
         "action": "deny"},
        {"name": "regex", "match": {"arguments": {"command": "^make "}}, "action": "allow"},
        {"name": "glob", "match": {"tool": "mcp__*"}, "action": "allow"},
    )  # fmt: skip
    assert p.evaluate(bash("rm x", agent="codex")).action == "deny"
    assert p.evaluate(bash("rm x", agent="claude-code")).matched == ()
    assert p.evaluate(bash("make build")).winners == ("regex",)
    assert p.evaluate(ApprovalEvent(tool_name="mcp__x__y")).winners == ("glob",)


def test_the_command_is_parsed_once_per_evaluation(monkeypatch: pytest.MonkeyPatch) -> None:
    import approvals._internal.policy as policy_module

    calls: list[str] = []
    real = policy_module.analysis_of

    def counting(event: ApprovalEvent) -> Any:
        calls.append(event.command or "")
        return real(event)

    monkeypatch.setattr(policy_module, "analysis_of", counting)
    p = policy(*(rule(a, command={"program": "x"}) for a in ("deny", "ask", "allow")))
    p.evaluate(bash("x y"))
    assert calls == ["x y"]


def test_an_analysis_failure_is_asked_never_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("planted")

    monkeypatch.setattr("approvals._internal.shell.normalise.read", broken)
    view._cached.cache_clear()  # `ls -la` parsed by an earlier test would not be again
    p = policy(rule("allow", command={"read_only": True}), rule("ask", command={"program": "x"}))
    decision = p.evaluate(bash("ls -la"))
    assert decision.action == "ask"
    assert decision.matched == ("r-ask",)


@pytest.mark.parametrize(
    ("match", "problem"),
    [
        ({"command": {"flags": ["r"]}}, "is not an option"),
        ({"command": {"program": []}}, "at least 1 item"),
        ({"command": {"program": " "}}, "may not be blank"),
        ({"command": {"progam": "rm"}}, "unknown field; did you mean 'program'?"),
        ({"risks": ["rm_rf"]}, "rules[0].match.risks[0]"),
        ({"command": {"read_only": "yes please"}}, "read_only"),
    ],
)
def test_invalid_command_matchers_are_named(match: dict[str, Any], problem: str) -> None:
    with pytest.raises(PolicyError) as e:
        policy({"name": "bad", "match": match, "action": "deny"})
    assert problem in e.value.message


@pytest.mark.parametrize(
    ("rule_data", "warning"),
    [
        ({"match": {"command": {"program": "/bin/rm"}}, "action": "deny"}, "compared by basename"),
        ({"match": {"command": {"program": "sudo"}}, "action": "deny"}, "sudo is unwrapped"),
        ({"match": {"command": {"program": "bash"}}, "action": "deny"}, "script file"),
        ({"match": {"command": {"program": "rm", "read_only": True}}, "action": "allow"},
         "never matches program 'rm'"),
        ({"match": {"command": {"program": "rm", "flags": ["--recusive"]}}, "action": "deny"},
         "rm has no option '--recusive'"),
        ({"match": {"command": {"program": "git", "subcommand": "push", "flags": ["--forse"]}},
          "action": "deny"}, "git has no option '--forse'"),
        ({"match": {"kind": "file", "command": {"program": "rm"}}, "action": "deny"},
         "never carries one"),
        ({"match": {"risks": ["unanalysable"]}, "action": "allow"}, "never matches an allow"),
        ({"match": {"command": {"program": "source"}}, "action": "allow"}, "always unanalysable"),
    ],
)  # fmt: skip
def test_policy_check_warns_about_rules_that_never_match(
    rule_data: dict[str, Any], warning: str
) -> None:
    warnings = rule_warnings(policy({"name": "r", **rule_data}))
    assert any(warning in w for w in warnings), warnings
    assert all(w.startswith("rules[0] (r): ") for w in warnings)


def test_sensible_rules_get_no_warning() -> None:
    p = policy(
        rule("deny", tool="Bash", command={"program": "rm", "flags": ["-r", "--force"]}),
        rule("ask", command={"program": "git", "subcommand": "push", "flags": ["-f"]}),
        rule("allow", command={"read_only": True}),
        {"name": "t", "match": {"command": {"program": "terraform", "flags": "-auto-approve"}},
         "action": "deny"},
        {"name": "x", "match": {"command": {"program": "make", "flags": "-j"}}, "action": "ask"},
    )  # fmt: skip
    assert rule_warnings(p) == []
