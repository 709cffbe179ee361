"""The `approval-bot` commands (pending, show, approve, deny, audit, request, hook) and output.

`pending`, `show`, `approve`, `deny` and `audit` work on an `ApprovalStore`;
`request` and `hook` go through an `ApprovalClient`. Parsing, configuration
and exit statuses are `bot.cli`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
from datetime import datetime
from typing import TextIO

from pydantic import ValidationError

from approvals.approval import Approval, already_decided, approval_object
from approvals.client import ApprovalClient
from approvals.errors import ApprovalTimeout, InvalidRequest
from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest
from approvals.policy import Policy
from approvals.policy_file import build_policy
from approvals.service import Actor, ApprovalService
from approvals.store.store import ApprovalStore
from bot.settings import Settings


class CliError(Exception):
    """Ends the command with `message` on stderr and exit status `code`."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.message, self.code = message, code


def policy_for(settings: Settings) -> Policy:
    return build_policy(
        settings.approvals_policy_file,
        settings.approvals_default_channel,
        tuple(settings.approvals_reviewers),
    )


# -- formatting --------------------------------------------------------------------------------


def ago(moment: datetime | None, now: datetime) -> str:
    """`5s`, `12m`, `3h`, `2d` between `moment` and `now` (negative: in the future)."""
    if moment is None:
        return "-"
    seconds = (now - moment).total_seconds()
    size = abs(seconds)
    for unit, span in (("d", 86400), ("h", 3600), ("m", 60)):
        if size >= span:
            text = f"{int(size // span)}{unit}"
            break
    else:
        text = f"{int(size)}s"
    return text if seconds >= 0 else f"in {text}"


def table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(), file=out
        )


def clip(text: str, size: int) -> str:
    return text if len(text) <= size else text[: size - 1] + "…"


# -- commands on Redis -------------------------------------------------------------------------


async def cmd_pending(args: argparse.Namespace, store: ApprovalStore, out: TextIO) -> int:
    requests = await store.list_pending(limit=args.limit)
    if args.json:
        for request in requests:
            print(json.dumps(approval_object(request), ensure_ascii=False), file=out)
        return 0
    if not requests:
        print("no pending approval requests", file=out)
        return 0
    now = store.now()
    rows = [["ID", "AGE", "TOOL", "ROUTE", "CHANNEL", "VOTES", "DEADLINE"]]
    for r in requests:
        approvals = sum(1 for v in r.votes if v.outcome == "approve")
        rows.append(
            [
                r.id,
                ago(r.created_at, now),
                clip(r.event.tool_name, 32),
                r.route,
                r.channel or "-",
                f"{approvals}/{r.quorum}",
                ago(r.deadline_at, now),
            ]
        )
    table(rows, out)
    return 0


def describe(request: ApprovalRequest, now: datetime) -> list[str]:
    """The request as readable lines (arguments masked as in Slack)."""
    from bot.masking import hidden_values, mask_arguments, mask_text

    cfg, event, d = request.config, request.event, request.decision
    hide = hidden_values(event.arguments, cfg.sensitivity)
    arguments = json.dumps(
        mask_arguments(event.arguments, cfg.sensitivity), indent=2, ensure_ascii=False, default=str
    )
    lines = [
        f"{request.id}  {request.status}",
        f"tool:       {event.tool_name} ({event.kind})",
        f"prompt:     {mask_text(request.prompt, hide=hide)}",
        f"kind:       {cfg.kind}"
        + (f" [{', '.join(cfg.options)}]" if cfg.options else "")
        + f", sensitivity {cfg.sensitivity}",
        "arguments:  " + arguments.replace("\n", "\n            "),
    ]
    for label, value in (
        ("command", mask_text(event.command or "", hide=hide)),
        ("path", event.path),
        ("cwd", event.cwd),
        ("agent", event.agent),
        ("session", event.session_id),
        ("call id", event.call_id),
        ("requester", request.requester),
    ):
        if value:
            lines.append(f"{label + ':':<11} {value}")
    lines.append(f"route:      {request.route} → {request.channel or '-'}")
    reviewers = ", ".join(request.reviewers) or "anyone"
    lines.append(f"reviewers:  {reviewers} (quorum {request.quorum})")
    edited = d.edited_arguments if d and d.edited_arguments is not None else None
    proposal = request.proposal
    if edited is not None or proposal is not None:
        label = "edited:" if edited is not None else "proposed:"
        by = (d.edited_by if edited is not None and d else None) or (
            proposal.by if proposal else "-"
        )
        shown = edited if edited is not None else (proposal.arguments if proposal else {})
        text = json.dumps(
            mask_arguments(shown, cfg.sensitivity),
            indent=2,
            ensure_ascii=False,
            default=str,
        )
        lines.append(f"{label:<11} by {by}")
        lines.append("            " + text.replace("\n", "\n            "))
    for vote in request.votes:
        why = f": {vote.reason}" if vote.reason else ""
        lines.append(f"vote:       {vote.user} {vote.outcome} at {vote.at.isoformat()}{why}")
    lines.append(
        f"created:    {request.created_at.isoformat()} ({ago(request.created_at, now)} ago)"
    )
    if request.deadline_at and request.status == "pending":  # a decided one has none left
        lines.append(
            f"deadline:   {request.deadline_at.isoformat()} ({ago(request.deadline_at, now)})"
        )
    if d is not None:
        lines.append(
            f"decision:   {d.outcome} by {d.decided_by or '-'} via {d.via} at "
            f"{d.decided_at.isoformat()}"
        )
        for label, value in (("reason", d.reason), ("input", d.input), ("selection", d.selection)):
            if value:
                lines.append(f"{label + ':':<11} {value}")
        if d.for_session:
            lines.append(f"for session: yes (scope {d.scope or 'call'})")
    if request.message:
        lines.append(f"slack:      {request.message.channel} ts {request.message.ts}")
    return lines


async def cmd_show(args: argparse.Namespace, store: ApprovalStore, out: TextIO) -> int:
    request = await store.get(args.id)
    if args.json:
        print(json.dumps(approval_object(request), indent=2, ensure_ascii=False), file=out)
    else:
        print("\n".join(describe(request, store.now())), file=out)
    return 0


def operator(name: str | None) -> Actor:
    who = name or getpass.getuser()
    return Actor(id=f"cli:{who}", via="cli")


async def cmd_decide(
    args: argparse.Namespace, store: ApprovalStore, out: TextIO, settings: Settings
) -> int:
    outcome = "approve" if args.command == "approve" else "deny"
    try:
        policy = policy_for(settings)
    except InvalidRequest as e:  # break-glass must work with a broken policy file
        print(f"warning: ignoring the policy file: {e.message}", file=sys.stderr)
        policy = Policy()
    service = ApprovalService(store, policy)
    if outcome == "approve":
        result = await service.decide(
            args.id,
            "approve",
            operator(args.as_name),
            input=args.input,
            selection=args.selection,
            for_session=args.for_session,
            scope=args.scope,
        )
    else:
        result = await service.decide(args.id, "deny", operator(args.as_name), reason=args.reason)
    if result.status != "decided":
        raise already_decided(result.request)
    print(f"{result.request.id} {Approval.from_request(result.request).describe()}", file=out)
    return 0


async def cmd_audit(args: argparse.Namespace, store: ApprovalStore, out: TextIO) -> int:
    entries = await store.audit_entries(since=args.since, request_id=args.request_id)
    if args.json:
        for entry in entries:
            print(json.dumps(entry.as_dict(), ensure_ascii=False), file=out)
        return 0
    if not entries:
        print("no audit entries", file=out)
        return 0
    rows = [["AT", "ID", "EVENT", "BY", "VIA", "REASON"]]
    rows += [
        [
            e.at.isoformat(timespec="seconds"),
            e.request_id,
            e.event,
            e.by or "-",
            e.via or "-",
            clip(e.reason.replace("\n", " "), 60),
        ]
        for e in entries
    ]
    table(rows, out)
    return 0


# -- commands through the client -----------------------------------------------------------


#: The `request` flag that sets each field, for error lines.
_REQUEST_FLAGS = {
    "tool_name": "--tool",
    "arguments": "--args",
    "kind": "--kind",
    "options": "--options",
    "prompt": "--prompt",
    "sensitivity": "--sensitivity",
    "deadline_seconds": "--deadline",
    "call_id": "--call-id",
    "session_id": "--session-id",
    "agent": "--agent",
}


def request_problems(error: ValidationError) -> list[str]:
    """One line per problem, naming the flag: `--options: must be unique`."""
    lines = []
    for err in error.errors(include_url=False, include_input=False):
        field = str(err["loc"][0]) if err["loc"] else ""
        flag = _REQUEST_FLAGS.get(field, field or "request")
        ctx = err.get("ctx") or {}
        if err["type"] == "value_error":
            message = str(ctx.get("error", err["msg"]))
        elif err["type"] == "string_too_short" and ctx.get("min_length") == 1:
            message = "must not be empty"
        elif err["type"] == "string_too_long":
            message = f"must be at most {ctx.get('max_length')} characters"
        else:
            message = err["msg"][:1].lower() + err["msg"][1:]
        if not err["loc"] and message.startswith("kind 'choice'"):
            flag = "--kind choice"
            message = "needs --options (a comma-separated list)"
        lines.append(f"{flag}: {message}")
    return lines


async def withdraw(client: ApprovalClient, request_id: str) -> None:
    """Cancel a request its requester stopped waiting for (its Slack message says so)."""
    try:
        await asyncio.wait_for(
            client.cancel(request_id, reason="the requester stopped waiting (Ctrl-C)"), 5
        )
    except Exception as e:
        print(f"could not withdraw {request_id}: {e}", file=sys.stderr)
    else:
        print(f"withdrew {request_id}", file=sys.stderr)


async def cmd_request(args: argparse.Namespace, client: ApprovalClient, out: TextIO) -> int:
    try:
        arguments = json.loads(args.args)
    except ValueError as e:
        raise CliError(f"--args is not valid JSON: {e}") from e
    if not isinstance(arguments, dict):
        raise CliError('--args must be a JSON object, e.g. \'{"env": "prod"}\'')
    options = tuple(o.strip() for o in args.options.split(",")) if args.options else None
    problems: list[str] = []
    try:
        config = ApprovalConfig(
            kind=args.kind,
            options=options,
            prompt=args.prompt,
            sensitivity=args.sensitivity,
            deadline_seconds=args.deadline,
            allow_for_session=getattr(args, "allow_for_session", False),
        )
    except ValidationError as e:
        problems += request_problems(e)
    try:
        ApprovalEvent(
            tool_name=args.tool,
            arguments=arguments,
            call_id=args.call_id,
            session_id=args.session_id,
            agent=args.agent,
        )
    except ValidationError as e:
        problems += request_problems(e)
    if problems:
        raise CliError("invalid request:\n" + "\n".join(problems))
    approval = await client.request(
        args.tool,
        arguments,
        config=config,
        call_id=args.call_id,
        session_id=args.session_id,
        agent=args.agent,
        route=args.route,
    )
    if approval.is_pending:
        print(f"waiting for a decision on {approval.id} … (Ctrl-C withdraws it)", file=sys.stderr)
        try:
            approval = await client.wait(approval.id, args.wait)
        except asyncio.CancelledError:  # Ctrl-C: nobody waits for the answer any more
            await withdraw(client, approval.id)
            raise
        except ApprovalTimeout as e:
            print(
                f"timeout: {e.message} (still pending: approval-bot show {approval.id})",
                file=sys.stderr,
            )
            return 2
    if args.json:
        print(json.dumps(approval.model_dump(mode="json"), ensure_ascii=False), file=out)
    else:
        print(f"{approval.id} {approval.describe()}", file=out)
    if approval.approved:
        return 0
    return 2 if approval.status == "error" else 1
