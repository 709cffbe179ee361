"""`approval-bot webhooks …`: list deliveries, retry one, show or rotate a principal's secret.

Work on the bot's Redis (`REDIS_URL`, `APPROVALS_PREFIX`), like `pending`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, TextIO

from bot.cli.connect import on_store, run_async

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
    a.add_argument("--principal", help="whose secret (default: the bare-token principal)")
    a.add_argument(
        "--rotate", action="store_true", help="new secret; the old one still signs for 24 h"
    )


async def cmd_webhooks(args: argparse.Namespace, store: ApprovalStore, out: TextIO) -> int:
    from approvals._internal.store.webhooks import (
        DEFAULT_PRINCIPAL,
        Deliveries,
        WebhookSecrets,
    )
    from bot.cli.output import ago, clip, table

    args.principal = getattr(args, "principal", None) or DEFAULT_PRINCIPAL
    deliveries = Deliveries(store.redis, store.keys, clock=store.clock)
    if args.webhooks_command == "secret":
        secrets = WebhookSecrets(store.redis, store.keys, clock=store.clock)
        if args.rotate:
            secret = await secrets.rotate(args.principal)
            print(secret, file=out)
            print(
                f"rotated the secret of {args.principal!r}; the previous one also signs for 24 h",
                file=sys.stderr,
            )
        else:
            print(await secrets.current(args.principal), file=out)
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


def run(args: argparse.Namespace, settings: Settings) -> int:
    return run_async(
        settings, on_store(settings, lambda store: cmd_webhooks(args, store, sys.stdout))
    )
