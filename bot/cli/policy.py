"""`approval-bot policy check FILE` and `approval-bot policy explain "COMMAND"`.

`check` validates a policy file, prints what it holds, and warns about rules that can
never match (`approvals._internal.policy_file.rule_warnings`). `explain` shows how the policy sees a
shell command: the parse (each simple command where it was found), the normalised simple
commands, what could not be analysed, the risks, every rule that matched (and on which
commands), and the merged outcome (`approvals/_internal/shell/`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from bot.cli.output import plural

if TYPE_CHECKING:
    from approvals._internal.policy import Policy
    from bot.core.settings import Settings


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("policy", help="policy files: check one, explain a shell command")
    p.set_defaults(run=run)
    actions = p.add_subparsers(dest="policy_command", required=True, metavar="ACTION")
    c = actions.add_parser("check", help="validate a policy file and print what it holds")
    c.add_argument("file", type=Path)
    e = actions.add_parser("explain", help="show how the policy parses and judges a shell command")
    e.add_argument("shell_command", metavar="COMMAND", help="the command line, quoted")
    e.add_argument("--policy", type=Path, help="the policy file (default: the configured one)")
    e.add_argument("--cwd", help="the working directory paths are judged against")
    e.add_argument("--tool", default="Bash", help="the tool name (default: Bash)")
    e.add_argument("--agent", help="the agent name rules may match")


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.policy_command == "explain":
        return explain(args, settings, sys.stdout)
    return check(args.file, settings, sys.stdout)


def check(path: Path, settings: Settings, out: TextIO) -> int:
    """`policy check FILE`: exit 0 and a summary when valid (warnings on stderr), 1 and every
    problem when not."""
    from approvals._internal.policy_file import PolicyError, build_policy, rule_warnings

    try:
        policy = build_policy(
            path, settings.approvals_default_channel, tuple(settings.approvals_reviewers)
        )
    except PolicyError as e:
        print(e.message, file=sys.stderr)
        return 1
    print(
        f"{path}: ok — {plural(len(policy.routes), 'route')}, {plural(len(policy.rules), 'rule')}",
        file=out,
    )
    for name, route in policy.routes.items():
        reviewers = ", ".join(route.reviewers) or "anyone"
        print(
            f"  route {name}: channel {route.channel}, quorum {route.quorum}, "
            f"on_timeout {route.on_timeout}, reviewers {reviewers}",
            file=out,
        )
    for rule in policy.rules:
        print(f"  rule {rule.name}: {rule.action}", file=out)
    for warning in rule_warnings(policy):
        print(f"{path}: warning: {warning}", file=sys.stderr)
    return 0


def _policy(args: argparse.Namespace, settings: Settings) -> tuple[Policy, str]:
    from approvals._internal.policy_file import build_policy

    file = args.policy or settings.approvals_policy_file
    policy = build_policy(
        file, settings.approvals_default_channel, tuple(settings.approvals_reviewers)
    )
    return policy, str(file) if file else "the default policy (no policy file)"


def explain(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """`policy explain COMMAND`: exit 0 having printed the explanation; 1 for a bad policy."""
    from approvals._internal.policy_file import PolicyError
    from approvals._internal.shell.matching import matching_commands
    from approvals._internal.shell.readonly import why_not
    from approvals._internal.shell.view import analysis
    from approvals.models import ApprovalEvent

    try:
        policy, source = _policy(args, settings)
    except PolicyError as e:
        print(e.message, file=sys.stderr)
        return 1
    command: str = args.shell_command
    event = ApprovalEvent(
        kind="command", tool_name=args.tool, command=command, cwd=args.cwd, agent=args.agent
    )
    seen = analysis(command, args.cwd)
    parsed = seen.parsed
    print(f"command: {command}", file=out)
    print(f"policy:  {source}", file=out)
    print("parse:", file=out)
    for i, c in enumerate(parsed.commands, 1):
        where = " > ".join(c.context) or "top level"
        print(f"  {i}. {c.source}   [{where}]", file=out)
    for assignment in parsed.assignments:
        print(f"  -  {assignment}   [assignment]", file=out)
    if parsed.functions:
        print(f"  functions defined: {', '.join(parsed.functions)}", file=out)
    print("simple commands:", file=out)
    for i, c in enumerate(parsed.commands, 1):
        why = why_not(c)
        verdict = "read-only" if why is None else f"not read-only: {why}"
        print(f"  {i}. {c.line()}", file=out)
        print(f"     {verdict}", file=out)
    if not parsed.commands:
        print("  (none)", file=out)
    for problem in parsed.problems:
        print(f"unanalysable: {problem}", file=out)
    print("risks:" if seen.risks else "risks: none", file=out)
    for risk in seen.risks:
        print(f"  {risk.line()}", file=out)
    decision = policy.evaluate(event)
    print("rules matched:" if decision.matched else "rules matched: none", file=out)
    for rule in policy.rules:
        if rule.name not in decision.matched:
            continue
        details = []
        if rule.match.is_command_rule and not parsed.analysable and rule.action == "ask":
            details.append("the command is unanalysable")
        elif rule.match.command is not None:
            hits = matching_commands(rule.match.command, seen)
            index = [str(list(parsed.commands).index(c) + 1) for c in hits]
            if index:
                details.append(f"simple commands {', '.join(index)}")
        if rule.match.risks is not None:
            found = [r for r in rule.match.risks if r in seen.risk_codes]
            if found:
                details.append(f"risks {', '.join(found)}")
        detail = f" ({'; '.join(details)})" if details else ""
        print(f"  {rule.name}: {rule.action}{detail}", file=out)
    outcome = f"{decision.action}"
    if decision.action == "ask":
        outcome += f" on route {decision.route_name}"
    print(f"outcome: {outcome}", file=out)
    for line in (decision.reason or "").splitlines():
        if line.strip():
            print(f"  {line}", file=out)
    return 0
