"""`approval-bot`: the command line — serve, pending/show/approve/deny/audit, request, hooks.

Configuration comes from the environment through `config.settings`.
`pending`, `show`, `approve`, `deny` and `audit` work on the bot's Redis
(`REDIS_URL`, `APPROVALS_PREFIX`); `request` and `hook` use the bot's HTTP
API when `APPROVALS_URL` (+ `APPROVALS_TOKEN`) is set, else Redis. A CLI
decision goes through the same compare-and-set as a Slack click, is audited
with `via=cli`, and queues the Slack message update.

Exit status: 0 done (or approved), 1 refused (unknown id, already decided,
denied), 2 usage, configuration or connection problem (and timeouts).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import logging
import re
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from approvals.agent_hooks import hook_metadata, parse_hook_input, run_hook, time_budget
from approvals.client import (
    Approval,
    ApprovalClient,
    HttpTransport,
    RedisTransport,
    already_decided,
)
from approvals.connection import connect
from approvals.errors import (
    AlreadyDecided,
    ApprovalError,
    ApprovalTimeout,
    InvalidRequest,
    NotAllowed,
    NotFound,
    StoreUnavailable,
)
from approvals.keys import Keys
from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest
from approvals.policy import Policy
from approvals.policy_file import PolicyError, build_policy
from approvals.service import Actor, ApprovalService
from approvals.store import ApprovalStore
from config.settings import Settings, SettingsError, load_settings

log = logging.getLogger(__name__)

_STARTED = time.monotonic()  # hooks answer within their timeout, counted from here
DEFAULT_HOOK_TIMEOUT = 60.0  # Claude Code's default for command hooks
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_REDIS_NEEDED = "pending, show, approve, deny and audit need direct access to the bot's Redis"


class CliError(Exception):
    """Ends the command with `message` on stderr and exit status `code`."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.message, self.code = message, code


# -- arguments -------------------------------------------------------------------------------


def duration(text: str) -> float:
    """`90`, `30s`, `15m`, `2h`, `1d` → seconds (not negative)."""
    try:
        seconds = float(text)
    except ValueError:
        found = _DURATION.fullmatch(text.strip())
        if not found:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a duration such as 30, 30s, 15m, 2h"
            ) from None
        seconds = float(found.group(1)) * _UNITS[found.group(2)]
    if not 0 <= seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 30, 30s, 15m, 2h")
    return seconds


def positive_duration(text: str) -> float:
    seconds = duration(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be more than 0 seconds")
    return seconds


def since(text: str) -> datetime:
    """`--since`: an ISO time (UTC unless it says otherwise) or a duration back from now."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return datetime.now(UTC) - timedelta(seconds=duration(text))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="approval-bot", description="Slack approvals for AI agents."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("serve", help="run the bot: Slack, HTTP API, dispatcher, sweeper")

    p = sub.add_parser("pending", help="list pending approval requests")
    p.add_argument("--json", action="store_true", help="one approval object per line")
    p.add_argument("--limit", type=int, default=100)

    p = sub.add_parser("show", help="show one approval request")
    p.add_argument("id")
    p.add_argument("--json", action="store_true", help="the raw approval object (unmasked)")

    p = sub.add_parser("approve", help="approve a pending request (break-glass)")
    p.add_argument("id")
    answer = p.add_mutually_exclusive_group()
    answer.add_argument("--input", help="the typed answer, for kind 'input'")
    answer.add_argument("--selection", help="the chosen option, for kind 'choice'")
    p.add_argument("--for-session", action="store_true", help="also approve for the session")
    p.add_argument("--as", dest="as_name", metavar="NAME", help="who decides (default: $USER)")

    p = sub.add_parser("deny", help="deny a pending request")
    p.add_argument("id")
    p.add_argument("--reason", required=True, help="shown to the agent and in Slack")
    p.add_argument("--as", dest="as_name", metavar="NAME", help="who decides (default: $USER)")

    p = sub.add_parser("audit", help="export the audit log")
    p.add_argument("--since", type=since, help="ISO time, or a duration back: 30m, 1h, 7d")
    p.add_argument("--id", dest="request_id", help="only this request")
    p.add_argument("--json", action="store_true", help="JSON lines")

    p = sub.add_parser("request", help="ask for an approval from a shell script")
    p.add_argument("--tool", required=True)
    p.add_argument("--args", default="{}", help="the arguments, a JSON object")
    p.add_argument("--kind", choices=("approval", "choice", "input"), default="approval")
    p.add_argument("--options", help="comma-separated options, for --kind choice")
    p.add_argument("--prompt")
    p.add_argument("--sensitivity", choices=("low", "pii", "secret"), default="low")
    p.add_argument("--deadline", type=positive_duration, help="the reviewers' deadline, e.g. 30m")
    p.add_argument("--call-id", help="retrying with the same id finds the same request")
    p.add_argument("--session-id")
    p.add_argument("--agent", default="cli")
    p.add_argument("--channel")
    p.add_argument("--wait", type=duration, help="seconds to wait (default: until decided)")
    p.add_argument("--json", action="store_true", help="print the approval object")

    p = sub.add_parser("policy", help="policy files")
    checks = p.add_subparsers(dest="policy_command", required=True, metavar="ACTION")
    c = checks.add_parser("check", help="validate a policy file and print what it holds")
    c.add_argument("file", type=Path)

    p = sub.add_parser("hook", help="agent hooks: the hook JSON on stdin, the answer on stdout")
    hooks = p.add_subparsers(dest="dialect", required=True, metavar="AGENT")
    for name, agent in (("claude-code", "Claude Code"), ("codex", "Codex")):
        h = hooks.add_parser(name, help=f"{agent} PreToolUse / PermissionRequest command hook")
        h.add_argument(
            "--timeout",
            type=positive_duration,
            default=DEFAULT_HOOK_TIMEOUT,
            help="the hook's timeout in the agent's settings (answers before it)",
        )
        h.add_argument("--on-timeout", choices=("deny", "ask"), default="deny")
    return parser


# -- plumbing ----------------------------------------------------------------------------------


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )


def policy_for(settings: Settings) -> Policy:
    return build_policy(
        settings.approvals_policy_file,
        settings.approvals_default_channel,
        tuple(settings.approvals_reviewers),
    )


async def open_store(settings: Settings) -> ApprovalStore:
    redis = connect(settings.redis_url_or_default, client_name="approval-bot-cli")
    try:
        await redis.ping()
    except Exception as e:
        await redis.aclose()
        raise CliError(
            f"cannot reach Redis at {settings.redis_url_redacted} (REDIS_URL): {e}\n"
            f"{_REDIS_NEEDED}: set REDIS_URL (and APPROVALS_PREFIX) to the bot's"
        ) from e
    return ApprovalStore(redis, Keys(settings.approvals_prefix))


def open_client(settings: Settings) -> ApprovalClient:
    if settings.approvals_url:
        if settings.approvals_token is None:
            raise CliError("APPROVALS_TOKEN is required with APPROVALS_URL")
        token = settings.approvals_token.get_secret_value()
        return ApprovalClient(HttpTransport(settings.approvals_url, token))
    transport = RedisTransport(
        connect(settings.redis_url_or_default, client_name="approval-bot-cli"),
        Keys(settings.approvals_prefix),
        policy=policy_for(settings),
    )
    return ApprovalClient(transport)


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
            print(json.dumps(request.public(), ensure_ascii=False), file=out)
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
    for vote in request.votes:
        why = f": {vote.reason}" if vote.reason else ""
        lines.append(f"vote:       {vote.user} {vote.outcome} at {vote.at.isoformat()}{why}")
    lines.append(
        f"created:    {request.created_at.isoformat()} ({ago(request.created_at, now)} ago)"
    )
    if request.deadline_at:
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
            lines.append("for session: yes")
    if request.message:
        lines.append(f"slack:      {request.message.channel} ts {request.message.ts}")
    return lines


async def cmd_show(args: argparse.Namespace, store: ApprovalStore, out: TextIO) -> int:
    request = await store.get(args.id)
    if args.json:
        print(json.dumps(request.public(), indent=2, ensure_ascii=False), file=out)
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


async def cmd_request(args: argparse.Namespace, client: ApprovalClient, out: TextIO) -> int:
    try:
        arguments = json.loads(args.args)
    except ValueError as e:
        raise CliError(f"--args is not valid JSON: {e}") from e
    if not isinstance(arguments, dict):
        raise CliError('--args must be a JSON object, e.g. \'{"env": "prod"}\'')
    options = tuple(o.strip() for o in args.options.split(",")) if args.options else None
    try:
        config = ApprovalConfig(
            kind=args.kind,
            options=options,
            prompt=args.prompt,
            sensitivity=args.sensitivity,
            deadline_seconds=args.deadline,
        )
    except ValueError as e:
        raise CliError(f"invalid request: {e}") from e
    approval = await client.request(
        args.tool,
        arguments,
        config=config,
        call_id=args.call_id,
        session_id=args.session_id,
        agent=args.agent,
        channel=args.channel,
    )
    if approval.is_pending:
        print(f"waiting for a decision on {approval.id} …", file=sys.stderr)
        try:
            approval = await client.wait(approval.id, args.wait)
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


async def cmd_hook(
    args: argparse.Namespace, client: ApprovalClient, payload: Any, out: TextIO
) -> int:
    metadata = hook_metadata(payload)
    config = ApprovalConfig(deadline_seconds=args.timeout)  # reviewers see the real deadline

    async def submit(event: ApprovalEvent) -> ApprovalRequest:
        return (await client.submit(event, config, metadata=metadata)).to_request()

    async def wait(request_id: str, timeout: float) -> ApprovalRequest:  # noqa: ASYNC109
        return (await client.wait(request_id, timeout)).to_request()

    async def cancel(request_id: str, reason: str) -> ApprovalRequest:
        try:
            cancelled = await client.cancel(request_id, reason=reason, by=f"{args.dialect} hook")
        except AlreadyDecided:
            cancelled = await client.get(request_id)
        return cancelled.to_request()

    budget = time_budget(args.timeout) - (time.monotonic() - _STARTED)
    output = await run_hook(
        args.dialect,
        payload,
        submit,
        wait,
        timeout=max(budget, 0.05),
        on_timeout=args.on_timeout,
        cancel=cancel,
    )
    if output is not None:
        print(json.dumps(output, ensure_ascii=False), file=out)
    return 0


# -- entry point ---------------------------------------------------------------------------------


def read_hook_input(stream: TextIO) -> Any:
    text = stream.read()
    try:
        payload = json.loads(text)
    except ValueError as e:
        raise CliError(f"invalid hook input: stdin is not JSON ({e})") from e
    parse_hook_input(payload)  # InvalidRequest names the fields at fault
    return payload


async def run(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    if args.command in ("request", "hook"):
        payload = read_hook_input(sys.stdin) if args.command == "hook" else None
        async with open_client(settings) as client:
            if args.command == "hook":
                return await cmd_hook(args, client, payload, out)
            return await cmd_request(args, client, out)
    store = await open_store(settings)
    try:
        commands: dict[str, Callable[[], Awaitable[int]]] = {
            "pending": lambda: cmd_pending(args, store, out),
            "show": lambda: cmd_show(args, store, out),
            "approve": lambda: cmd_decide(args, store, out, settings),
            "deny": lambda: cmd_decide(args, store, out, settings),
            "audit": lambda: cmd_audit(args, store, out),
        }
        return await commands[args.command]()
    finally:
        await store.redis.aclose()


def check_policy(path: Path, settings: Settings, out: TextIO) -> int:
    """`policy check FILE`: exit 0 and a summary when valid, 1 and every problem when not."""
    try:
        policy = build_policy(
            path, settings.approvals_default_channel, tuple(settings.approvals_reviewers)
        )
    except PolicyError as e:
        print(e.message, file=sys.stderr)
        return 1
    print(f"{path}: ok — {len(policy.routes)} routes, {len(policy.rules)} rules", file=out)
    for name, route in policy.routes.items():
        reviewers = ", ".join(route.reviewers) or "anyone"
        print(
            f"  route {name}: channel {route.channel}, quorum {route.quorum}, "
            f"on_timeout {route.on_timeout}, reviewers {reviewers}",
            file=out,
        )
    for rule in policy.rules:
        print(f"  rule {rule.name}: {rule.action}", file=out)
    return 0


def serve(settings: Settings) -> int:
    from bot.app import serve as serve_bot

    configure_logging(settings.log_level)
    try:
        asyncio.run(serve_bot(settings))
    except KeyboardInterrupt:
        pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The `approval-bot` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as e:
        print(f"approval-bot: configuration error:\n{e}", file=sys.stderr)
        return 2
    if args.command == "serve":
        return serve(settings)
    if args.command == "policy":
        return check_policy(args.file, settings, sys.stdout)
    configure_logging("WARNING")
    try:
        return asyncio.run(run(args, settings, sys.stdout))
    except CliError as e:
        print(f"approval-bot: {e.message}", file=sys.stderr)
        return e.code
    except (NotFound, AlreadyDecided, NotAllowed) as e:
        print(f"approval-bot: {e.message}", file=sys.stderr)
        return 1
    except StoreUnavailable as e:
        where = "the approval bot" if settings.approvals_url else "Redis"
        print(f"approval-bot: cannot reach {where}: {e.message}", file=sys.stderr)
        return 2
    except ApprovalError as e:
        print(f"approval-bot: {e.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # exit 2, never 1: agents treat 1 as "go ahead" for hooks
        log.exception("unexpected error")
        print(f"approval-bot: unexpected error: {e!r}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
