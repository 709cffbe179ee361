"""`approval-bot pending | show | approve | deny | audit | request`: requests from a terminal.

`pending`, `show`, `approve`, `deny` and `audit` work on the bot's Redis: a decision goes
through the same compare-and-set as a Slack click (audited `via=cli`), for the version of the
arguments `show` printed (`--version original` or an edit's; without it an edited request is
refused). `request` asks through an `ApprovalClient`. Exit status: 0 done (or approved), 1
refused (unknown id, already decided, denied, edited since the version given), 2 usage,
configuration or connection problem (and timeouts).
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TextIO

from bot.cli.connect import CliError, on_store, open_client, policy_for, run_async
from bot.cli.durations import duration, positive_duration
from bot.cli.output import ago, block, clip, table, terminal

# Imported when a command runs: building the CLI's parser stays cheap.
if TYPE_CHECKING:
    import asyncio

    from pydantic import ValidationError

    from approvals._internal.service import Actor
    from approvals._internal.store.store import ApprovalStore
    from approvals.client import ApprovalClient
    from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest
    from bot.core.settings import Settings


def since(text: str) -> datetime:
    """`--since`: an ISO time (UTC unless it says otherwise) or a duration back from now."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return datetime.now(UTC) - timedelta(seconds=duration(text))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


#: How `show` and `--version` name the agent's own arguments (version '' inside).
ORIGINAL = "original"
_VERSION_HELP = (
    "the version of the arguments you decide, as `show` prints it: original, or an edit's "
    "version (needed once a reviewer edited the request)"
)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
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
    p.add_argument(
        "--scope",
        choices=("call", "prefix", "tool"),
        default="call",
        help="with --for-session: this exact call (default), the command's prefix, the tool",
    )
    p.add_argument("--as", dest="as_name", metavar="NAME", help="who decides (default: $USER)")
    p.add_argument("--version", dest="decided_version", metavar="VERSION", help=_VERSION_HELP)

    p = sub.add_parser("deny", help="deny a pending request")
    p.add_argument("id")
    p.add_argument("--reason", required=True, help="shown to the agent and in Slack")
    p.add_argument("--as", dest="as_name", metavar="NAME", help="who decides (default: $USER)")
    p.add_argument("--version", dest="decided_version", metavar="VERSION", help=_VERSION_HELP)

    p = sub.add_parser("audit", help="export the audit log")
    p.add_argument("--since", type=since, help="ISO time, or a duration back: 30m, 1h, 7d")
    p.add_argument("--id", dest="request_id", help="only this request")
    p.add_argument("--json", action="store_true", help="JSON lines")

    p = sub.add_parser("request", help="ask for an approval from a shell script")
    p.add_argument("--tool", required=True)
    add_call_arguments(p)
    p.add_argument("--deadline", type=positive_duration, help="the reviewers' deadline, e.g. 30m")
    p.add_argument("--call-id", help="retrying with the same id finds the same request")
    p.add_argument(
        "--wait",
        type=duration,
        help="seconds to wait (default: until decided); Ctrl-C, SIGTERM or SIGHUP withdraws "
        "the request (exit 130, 143, 129)",
    )
    p.add_argument("--json", action="store_true", help="print the approval object")
    for name in ("pending", "show", "approve", "deny", "audit", "request"):
        sub.choices[name].set_defaults(run=run)


def add_call_arguments(p: argparse.ArgumentParser) -> None:
    """What a call asks and how it is reviewed, as `request` and `preview` take them."""
    p.add_argument("--args", default="{}", help="the arguments, a JSON object")
    p.add_argument("--kind", choices=("approval", "choice", "input"), default="approval")
    p.add_argument("--options", help="comma-separated options, for --kind choice")
    p.add_argument("--prompt")
    p.add_argument("--sensitivity", choices=("low", "pii", "secret"), default="low")
    p.add_argument("--session-id")
    p.add_argument("--agent", default="cli")
    p.add_argument("--route", help="a policy route to ask on (the policy's rules still win)")
    p.add_argument(
        "--allow-for-session",
        action="store_true",
        help="let the reviewer also approve later calls of this session (needs --session-id)",
    )


def run(args: argparse.Namespace, settings: Settings) -> int:
    out = sys.stdout
    if args.command == "request":

        async def request() -> int:
            async with open_client(settings) as client:
                return await cmd_request(args, client, out)

        return run_async(settings, request)
    commands = {
        "pending": lambda store: cmd_pending(args, store, out),
        "show": lambda store: cmd_show(args, store, out),
        "approve": lambda store: cmd_decide(args, store, out, settings),
        "deny": lambda store: cmd_decide(args, store, out, settings),
        "audit": lambda store: cmd_audit(args, store, out),
    }
    return run_async(settings, on_store(settings, commands[args.command]))


# -- commands on Redis -------------------------------------------------------------------------


async def cmd_pending(args: argparse.Namespace, store: ApprovalStore, out: TextIO) -> int:
    from approvals.approval import approval_object

    requests = await store.list_pending(limit=args.limit)
    if args.json:
        for request in requests:
            print(block(json.dumps(approval_object(request), ensure_ascii=False)), file=out)
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
    """The request as readable lines (arguments masked as in Slack), its risk hints and the
    parsed view of its shell command among them."""
    from bot.masking.masker import hidden_values, mask_arguments, mask_text
    from bot.slack.render.risk_lines import parsed_texts, risk_texts

    cfg, event, d = request.config, request.event, request.decision
    hide = hidden_values(event.arguments, cfg.sensitivity)
    arguments = json.dumps(
        mask_arguments(event.arguments, cfg.sensitivity), indent=2, ensure_ascii=False, default=str
    )
    t = terminal
    lines = [
        f"{t(request.id)}  {request.status}",
        f"tool:       {t(mask_text(event.tool_name))} ({event.kind})",
        f"prompt:     {t(mask_text(request.prompt, hide=hide))}",
        f"kind:       {cfg.kind}"
        + (f" [{t(', '.join(cfg.options))}]" if cfg.options else "")
        + f", sensitivity {cfg.sensitivity}",
        "arguments:  " + block(arguments).replace("\n", "\n            "),
    ]
    # The risk hints and the parsed view, masked as Slack shows them (render/risk_lines.py).
    for name, text in risk_texts(request, tuple(hide)):
        lines.append(f"risk:       {t(name)}" + (f": {t(text)}" if text else ""))
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
            lines.append(f"{label + ':':<11} {t(value)}")
    for n, line in enumerate(parsed_texts(request, tuple(hide)) or []):
        lines.append(f"{'parsed:' if n == 0 else '':<11} {t(line)}")
    if request.is_pending:
        proposal = request.proposal
        if proposal is not None:
            lines.append(f"version:    {proposal.version} (edited by {t(proposal.by)})")
        else:
            lines.append(f"version:    {ORIGINAL} (the arguments as the agent asked)")
    lines.append(f"route:      {t(request.route)} → {t(request.channel or '-')}")
    reviewers = ", ".join(request.reviewers) or "anyone"
    lines.append(f"reviewers:  {t(reviewers)} (quorum {request.quorum})")
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
        lines.append(f"{label:<11} by {t(by)}")
        lines.append("            " + block(text).replace("\n", "\n            "))
    for vote in request.votes:
        why = f": {t(vote.reason)}" if vote.reason else ""
        lines.append(f"vote:       {t(vote.user)} {vote.outcome} at {vote.at.isoformat()}{why}")
    lines.append(
        f"created:    {request.created_at.isoformat()} ({ago(request.created_at, now)} ago)"
    )
    if request.deadline_at and request.status == "pending":  # a decided one has none left
        lines.append(
            f"deadline:   {request.deadline_at.isoformat()} ({ago(request.deadline_at, now)})"
        )
    if d is not None:
        lines.append(
            f"decision:   {d.outcome} by {t(d.decided_by or '-')} via {t(d.via)} at "
            f"{d.decided_at.isoformat()}"
        )
        for label, value in (
            ("reason", d.reason),
            ("input", d.input),
            ("selection", d.selection),
            ("question", mask_text(d.question or "", hide=hide)),
        ):
            if value:
                lines.append(f"{label + ':':<11} {t(value)}")
        if d.for_session:
            lines.append(f"for session: yes (scope {d.scope or 'call'})")
    if request.answered is not None:
        lines.append(f"answered:   by {t(request.answered.request_id)} (in the thread)")
    if request.answers is not None:
        asked = request.answers
        lines.append(
            f"answers:    {t(asked.request_id)}: asked by {t(asked.asked_by or '-')}: "
            f"{t(mask_text(asked.question, hide=hide))}"
        )
    if request.message:
        lines.append(f"slack:      {t(request.message.channel)} ts {t(request.message.ts)}")
    return lines


async def cmd_show(args: argparse.Namespace, store: ApprovalStore, out: TextIO) -> int:
    from approvals.approval import approval_object

    request = await store.get(args.id)
    if args.json:
        print(block(json.dumps(approval_object(request), indent=2, ensure_ascii=False)), file=out)
    else:
        print("\n".join(describe(request, store.now())), file=out)
    return 0


def operator(name: str | None) -> Actor:
    from approvals._internal.service import Actor

    who = name or getpass.getuser()
    return Actor(id=f"cli:{who}", via="cli")


async def cmd_decide(
    args: argparse.Namespace, store: ApprovalStore, out: TextIO, settings: Settings
) -> int:
    from approvals._internal.edits import current_version
    from approvals._internal.policy import Policy
    from approvals._internal.service import ApprovalService
    from approvals.approval import Approval, already_decided
    from approvals.errors import InvalidRequest

    outcome = "approve" if args.command == "approve" else "deny"
    try:
        policy = policy_for(settings)
    except InvalidRequest as e:  # break-glass must work with a broken policy file
        print(f"warning: ignoring the policy file: {e.message}", file=sys.stderr)
        policy = Policy()
    service = ApprovalService(store, policy)
    version = await decided_version(args, store)
    if outcome == "approve":
        result = await service.decide(
            args.id,
            "approve",
            operator(args.as_name),
            input=args.input,
            selection=args.selection,
            for_session=args.for_session,
            scope=args.scope,
            version=version,
        )
    else:
        result = await service.decide(
            args.id, "deny", operator(args.as_name), reason=args.reason, version=version
        )
    if result.status == "stale":
        now = current_version(result.request) or ORIGINAL
        raise CliError(
            f"{args.id} changed since version {args.decided_version or ORIGINAL}: it is now "
            f"version {now}; nothing was recorded. Run `approval-bot show {args.id}` and "
            "decide again.",
            1,
        )
    if result.status != "decided":
        raise already_decided(result.request)
    print(
        terminal(f"{result.request.id} {Approval.from_request(result.request).describe()}"),
        file=out,
    )
    return 0


async def decided_version(args: argparse.Namespace, store: ApprovalStore) -> str:
    """The version `approve`/`deny` decides: `--version` ('' for `original`); without it the
    agent's own arguments, refused (a `CliError`) when a reviewer edited them."""
    given = args.decided_version
    if given is not None:
        return "" if given == ORIGINAL else given
    request = await store.get(args.id)
    if request.is_pending and request.proposal is not None:
        p = request.proposal
        raise CliError(
            f"{args.id} was edited by {p.by} (version {p.version}); run `approval-bot show "
            f"{args.id}`, check the edited arguments, then add --version {p.version}"
        )
    return ""


async def cmd_audit(args: argparse.Namespace, store: ApprovalStore, out: TextIO) -> int:
    entries = await store.audit_entries(since=args.since, request_id=args.request_id)
    if args.json:
        for entry in entries:
            print(block(json.dumps(entry.as_dict(), ensure_ascii=False)), file=out)
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


async def withdraw(client: ApprovalClient, request_id: str, why: str = "Ctrl-C") -> None:
    """Cancel a request its requester stopped waiting for (its Slack message says so)."""
    import asyncio

    try:
        await asyncio.wait_for(
            client.cancel(request_id, reason=f"the requester stopped waiting ({why})"), 5
        )
    except Exception as e:
        print(f"could not withdraw {request_id}: {e}", file=sys.stderr)
    else:
        print(f"withdrew {request_id}", file=sys.stderr)


class StopSignals:
    """SIGTERM and SIGHUP (what `timeout`, CI runners and a closed terminal send) end a
    `request` as Ctrl-C does: the request it waits on is withdrawn, not left pending until
    its deadline. A signal that comes while the request is still being made is held until
    it exists (`cancel_on_signal`), so it can be withdrawn too. Where the loop cannot take
    signals (not the main thread), nothing changes."""

    SIGNALS = ("SIGTERM", "SIGHUP")

    def __init__(self) -> None:
        import signal

        self.signal: signal.Signals | None = None
        self._task: asyncio.Task[Any] | None = None
        self._armed = False
        self._handled: list[signal.Signals] = []

    def __enter__(self) -> StopSignals:
        import asyncio
        import contextlib
        import signal

        loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            for name in self.SIGNALS:
                sig = getattr(signal, name, None)
                if sig is not None:
                    loop.add_signal_handler(sig, self._received, sig)
                    self._handled.append(sig)
        return self

    def __exit__(self, *exc: object) -> None:
        import asyncio

        loop = asyncio.get_running_loop()
        for sig in self._handled:
            loop.remove_signal_handler(sig)

    def _received(self, sig: Any) -> None:
        if self.signal is None:
            self.signal = sig
            if self._armed and self._task is not None:
                self._task.cancel()

    def cancel_on_signal(self) -> None:
        """From now on a signal cancels the task; one already received cancels it now."""
        self._armed = True
        if self.signal is not None and self._task is not None:
            self._task.cancel()

    def uncancel(self) -> None:
        """The cancellation a signal caused is handled: the command returns normally."""
        if self._task is not None:
            self._task.uncancel()


def call_from_arguments(
    args: argparse.Namespace,
) -> tuple[dict[str, Any], ApprovalConfig, ApprovalEvent]:
    """The call `add_call_arguments` read (with `--tool`, and `--deadline`/`--call-id` where a
    command has them): its arguments, config and event; a `CliError` naming every problem,
    one line per flag."""
    from pydantic import ValidationError

    from approvals.models import ApprovalConfig, ApprovalEvent

    try:
        arguments = json.loads(args.args)
    except ValueError as e:
        raise CliError(f"--args is not valid JSON: {e}") from e
    if not isinstance(arguments, dict):
        raise CliError('--args must be a JSON object, e.g. \'{"env": "prod"}\'')
    options = tuple(o.strip() for o in args.options.split(",")) if args.options else None
    problems: list[str] = []
    config = event = None
    try:
        config = ApprovalConfig(
            kind=args.kind,
            options=options,
            prompt=args.prompt,
            sensitivity=args.sensitivity,
            deadline_seconds=getattr(args, "deadline", None),
            allow_for_session=args.allow_for_session,
        )
    except ValidationError as e:
        problems += request_problems(e)
    try:
        event = ApprovalEvent(
            tool_name=args.tool,
            arguments=arguments,
            call_id=getattr(args, "call_id", None),
            session_id=args.session_id,
            agent=args.agent,
        )
    except ValidationError as e:
        problems += request_problems(e)
    if problems or config is None or event is None:
        raise CliError("invalid request:\n" + "\n".join(problems))
    return arguments, config, event


async def cmd_request(args: argparse.Namespace, client: ApprovalClient, out: TextIO) -> int:
    import asyncio

    from approvals.errors import ApprovalTimeout

    arguments, config, _ = call_from_arguments(args)
    with StopSignals() as stopping:
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
            print(
                f"waiting for a decision on {approval.id} … (Ctrl-C withdraws it)",
                file=sys.stderr,
            )
            try:
                stopping.cancel_on_signal()  # a signal during the submit cancels now
                approval = await client.wait(approval.id, args.wait)
            except asyncio.CancelledError:  # Ctrl-C or a signal: nobody waits any more
                if stopping.signal is None:
                    await withdraw(client, approval.id)
                    raise
                await withdraw(client, approval.id, stopping.signal.name)
                stopping.uncancel()
                return 128 + stopping.signal.value
            except ApprovalTimeout as e:
                print(
                    f"timeout: {e.message} (still pending: approval-bot show {approval.id})",
                    file=sys.stderr,
                )
                return 2
        elif stopping.signal is not None:  # decided at once, but the caller is gone
            return 128 + stopping.signal.value
    if args.json:
        print(block(json.dumps(approval.model_dump(mode="json"), ensure_ascii=False)), file=out)
    else:
        print(terminal(f"{approval.id} {approval.describe()}"), file=out)
    if approval.approved:
        return 0
    return 2 if approval.status == "error" else 1
