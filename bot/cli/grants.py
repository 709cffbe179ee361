"""`approval-bot grants`: list live approve-for-session grants; `grants revoke ID` ends one.

Work on the bot's Redis (`REDIS_URL`, `APPROVALS_PREFIX`), like `pending`. A
revocation is audited (`grant_revoked`, by `cli:$USER` or `--as`).
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from typing import TYPE_CHECKING, TextIO

from bot.cli.connect import on_store, run_async

if TYPE_CHECKING:  # imported when run: building the CLI's parser stays cheap
    from approvals._internal.store.store import ApprovalStore
    from bot.core.settings import Settings


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("grants", help="approve-for-session grants: list, revoke")
    p.set_defaults(run=run)
    p.add_argument("--json", action="store_true", help="one grant per line")
    actions = p.add_subparsers(dest="grants_command", metavar="ACTION")
    a = actions.add_parser("revoke", help="end a grant now")
    a.add_argument("id", help="the grant id (grt_…)")
    a.add_argument("--as", dest="as_name", metavar="NAME", help="who revokes (default: $USER)")


async def cmd_grants(args: argparse.Namespace, store: ApprovalStore, out: TextIO) -> int:
    from approvals._internal.store.grants import GrantStore
    from bot.cli.output import ago, clip, table

    grants = GrantStore(store.redis, store.keys)
    if getattr(args, "grants_command", None) == "revoke":
        by = f"cli:{args.as_name or getpass.getuser()}"
        grant = await grants.revoke(args.id, by=by, now=store.now())
        print(f"{grant.id} revoked: {grant.label} (session {grant.session_id})", file=out)
        return 0
    listed = await grants.list(store.now())
    if args.json:
        for g in listed:
            print(json.dumps(g.model_dump(mode="json"), ensure_ascii=False), file=out)
        return 0
    if not listed:
        print("no live grants", file=out)
        return 0
    now = store.now()
    rows = [["ID", "PRINCIPAL", "SESSION", "AGENT", "TOOL", "SCOPE", "ALLOWS", "BY", "EXPIRES"]]
    for g in listed:
        rows.append(
            [
                g.id,
                g.principal or "-",
                clip(g.session_id, 24),
                g.agent or "-",
                clip(g.tool_name, 24),
                g.scope,
                clip(g.label.replace("`", ""), 48),
                g.decided_by or "-",
                ago(g.expires_at, now),
            ]
        )
    table(rows, out)
    return 0


def run(args: argparse.Namespace, settings: Settings) -> int:
    return run_async(
        settings, on_store(settings, lambda store: cmd_grants(args, store, sys.stdout))
    )
