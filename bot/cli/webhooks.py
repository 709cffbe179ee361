"""`approval-bot webhooks …`: list deliveries, retry one, show or rotate a principal's secret.

Work on the bot's Redis (`REDIS_URL`, `APPROVALS_PREFIX`), like `pending`. A request's
webhook is signed with the secret of the principal that asked (`bot/workers/webhooks.py`
`principal_of`); `secret` without `--principal` means the principal of the token in use
(`APPROVALS_TOKEN`: its `name:` in `APPROVALS_API_TOKENS`, or `token-<hash>` for a bare
token), else the only principal configured, else `default` (requests made without a
token); with several possible and no token in use it asks which. The secret goes to
stdout, the principal's name (and why it is that one) to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, TextIO

from bot.cli.connect import CliError, on_store, run_async

if TYPE_CHECKING:  # imported when run: building the CLI's parser stays cheap
    from approvals._internal.store.store import ApprovalStore
    from bot.core.settings import Settings


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("webhooks", help="decision webhooks: deliveries and signing secrets")
    p.set_defaults(run=run)
    actions = p.add_subparsers(dest="webhooks_command", required=True, metavar="ACTION")
    a = actions.add_parser("list", help="recent deliveries, newest first")
    a.add_argument("--failed", action="store_true", help="only deliveries that gave up")
    a.add_argument("--limit", type=int, default=50)
    a.add_argument("--json", action="store_true", help="one delivery per line, with attempts")
    a = actions.add_parser("retry", help="deliver again now (same webhook-id, fresh 24 h)")
    a.add_argument("id", help="the delivery id (msg_…) or the request id")
    a = actions.add_parser("secret", help="show (or --rotate) a principal's signing secret")
    a.add_argument(
        "--principal",
        help="whose secret (default: the principal of APPROVALS_TOKEN, else the only one "
        "in APPROVALS_API_TOKENS, else 'default': requests made without a token)",
    )
    a.add_argument(
        "--rotate", action="store_true", help="new secret; the old one still signs for 24 h"
    )


async def cmd_webhooks(args: argparse.Namespace, store: ApprovalStore, out: TextIO) -> int:
    from approvals._internal.store.webhooks import Deliveries, WebhookSecrets
    from bot.cli.output import ago, clip, table

    deliveries = Deliveries(store.redis, store.keys, clock=store.clock)
    if args.webhooks_command == "secret":
        secrets = WebhookSecrets(store.redis, store.keys, clock=store.clock)
        principal, why = args.principal, getattr(args, "principal_why", "as given")
        if args.rotate:
            secret = await secrets.rotate(principal)
            print(secret, file=out)
            print(
                f"rotated the secret of principal {principal!r} ({why}); "
                "the previous one also signs for 24 h",
                file=sys.stderr,
            )
        else:
            print(await secrets.current(principal), file=out)
            print(f"the secret of principal {principal!r} ({why})", file=sys.stderr)
        return 0
    if args.webhooks_command == "retry":
        delivery = await deliveries.retry(args.id)
        print(f"{delivery.id}: queued again for {delivery.url}", file=out)
        return 0
    listed = await deliveries.list(failed=args.failed, limit=args.limit)
    if args.json:
        for d in listed:
            row = d.summary()
            attempts = await deliveries.attempts(d.id)
            row["attempt_log"] = [a.model_dump(mode="json") for a in attempts]
            print(json.dumps(row, ensure_ascii=False), file=out)
        return 0
    if not listed:
        print("no failed webhook deliveries" if args.failed else "no webhook deliveries", file=out)
        return 0
    now = store.now()
    rows = [["ID", "AGE", "STATUS", "ATTEMPTS", "LAST", "URL"]]
    for d in listed:
        last = str(d.last_status or "") or (d.last_error or "-")
        rows.append(
            [d.id, ago(d.created_at, now), d.status, str(d.attempts), clip(last, 40), d.url]
        )
    table(rows, out)
    return 0


def secret_principal(given: str | None, settings: Settings) -> tuple[str, str]:
    """Whose secret `webhooks secret` means, and why that one (`CliError` when it cannot
    tell): never a principal whose webhooks the caller's requests are not signed with."""
    from approvals._internal.store.webhooks import DEFAULT_PRINCIPAL
    from bot.http.principals import AuthProblem, Principals, derived_name

    if given:
        return given, "as given"
    entries = [t.get_secret_value() for t in settings.approvals_api_tokens]
    admins = [t.get_secret_value() for t in settings.approvals_admin_tokens]
    principals = Principals(entries, admins)
    if settings.approvals_token is not None:
        token = settings.approvals_token.get_secret_value()
        if not principals.enabled:
            return derived_name(token), (
                "APPROVALS_TOKEN's, as a bare token; if the bot lists it as NAME:TOKEN, "
                "pass --principal NAME"
            )
        try:
            return principals.authenticate(f"Bearer {token}").name, "APPROVALS_TOKEN's"
        except AuthProblem:
            raise CliError(
                "APPROVALS_TOKEN is not one of APPROVALS_API_TOKENS or APPROVALS_ADMIN_TOKENS: "
                "pass --principal NAME"
            ) from None
    if len(principals.names) == 1:
        return principals.names[0], "the only principal of APPROVALS_API_TOKENS"
    if not principals.names:
        return DEFAULT_PRINCIPAL, "requests made without a token: Redis, in-process"
    raise CliError(
        f"which principal's secret? pass --principal NAME (one of: "
        f"{', '.join(principals.names)}), or set APPROVALS_TOKEN to the token whose it is"
    )


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.webhooks_command == "secret":
        try:
            args.principal, args.principal_why = secret_principal(args.principal, settings)
        except CliError as e:
            print(f"approval-bot: {e.message}", file=sys.stderr)
            return e.code
    return run_async(
        settings, on_store(settings, lambda store: cmd_webhooks(args, store, sys.stdout))
    )
