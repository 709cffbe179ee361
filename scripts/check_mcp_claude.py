"""The real Claude Code CLI against `approval-bot mcp` and the `defer` hook (not part of the
default test command; run `.venv/bin/python scripts/check_mcp_claude.py [--version V]`).

Claude Code is installed from the npm registry into the cache (`scripts/agent_harness.py`'s
`install`), the model is the scripted Anthropic API of `tests/support/fake_models.py` (the
prompt `RUN[case]: <command>` makes it call Bash once), Redis is a throwaway server, and a
reviewer decides through the real service. Cases:

- `--permission-prompt-tool mcp__approvals__permission_prompt`, approved: the command runs.
- the same, denied with a reason: the command does not run; the model reads the reason.
- a PreToolUse command hook with `--on-timeout defer`: the first `claude -p` stops with the
  call deferred and the request still pending; after the approval, `claude -p --resume`
  runs the command.

Prints one line per case and exits 0 when all pass, 1 when one does not, 2 when Claude Code
cannot be installed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from agent_harness import install  # noqa: E402

from approvals._internal.policy_file import default_policy  # noqa: E402
from approvals._internal.service import Actor, ApprovalService  # noqa: E402
from approvals._internal.store.connection import connect  # noqa: E402
from approvals._internal.store.keys import Keys  # noqa: E402
from approvals._internal.store.store import ApprovalStore  # noqa: E402
from bot.ops import embedded_redis  # noqa: E402
from tests.support.fake_models import FakeModels  # noqa: E402

REVIEWER = Actor("U0CHECK", via="slack")
PYTHON = sys.executable


async def run(
    argv: list[str], env: dict[str, str], cwd: Path, limit: float = 120
) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), limit)
    try:
        result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        result = {"unparsed": out.decode()[-500:], "stderr": err.decode()[-500:]}
    result["exit"] = proc.returncode
    return result


async def decide_when_pending(
    service: ApprovalService, decide: Callable[[str], Awaitable[Any]], within: float = 90
) -> str:
    async with asyncio.timeout(within):
        while True:
            pending = await service.store.list_pending()
            if pending:
                await decide(pending[0].id)
                return pending[0].id
            await asyncio.sleep(0.1)


async def main_async(version: str) -> int:
    binary = install("claude-code", version)
    server = embedded_redis.start()
    models = FakeModels()
    await models.start()
    keys = Keys("check-mcp-claude")
    redis = connect(server.url, client_name="check-mcp-claude")
    service = ApprovalService(ApprovalStore(redis, keys), default_policy("C0APPROVALS"))
    agent_env = {
        "REDIS_URL": server.url,
        "APPROVALS_PREFIX": keys.prefix,
        "APPROVALS_DEFAULT_CHANNEL": "C0APPROVALS",
        "PYTHONPATH": str(ROOT),
    }
    failures = 0
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            env = {
                "PATH": "/usr/bin:/bin",
                "HOME": str(work / "home"),
                "ANTHROPIC_BASE_URL": models.url,
                "ANTHROPIC_API_KEY": "sk-ant-test",
                "DISABLE_TELEMETRY": "1",
                "DISABLE_AUTOUPDATER": "1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                **agent_env,
            }
            (work / "home").mkdir()
            config = work / "mcp.json"
            config.write_text(
                json.dumps(
                    {
                        "mcpServers": {
                            "approvals": {
                                "command": PYTHON,
                                "args": ["-m", "bot.cli.main", "mcp", "--progress-interval", "2"],
                                "env": agent_env,
                            }
                        }
                    }
                )
            )

            def prompt_argv(case: str, marker: Path) -> list[str]:
                return [
                    str(binary), "-p", f"RUN[{case}]: touch {marker}",
                    "--mcp-config", str(config),
                    "--permission-prompt-tool", "mcp__approvals__permission_prompt",
                    "--permission-mode", "default", "--output-format", "json",
                ]  # fmt: skip

            # 1. permission_prompt, approved
            marker = work / "approved.marker"
            claude = asyncio.create_task(run(prompt_argv("approve", marker), env, work))
            await decide_when_pending(service, lambda rid: service.decide(rid, "approve", REVIEWER))
            await claude
            ok = marker.exists()
            failures += not ok
            print(f"permission_prompt approve: command ran={ok}  {'PASS' if ok else 'FAIL'}")

            # 2. permission_prompt, denied with a reason
            marker = work / "denied.marker"
            claude = asyncio.create_task(run(prompt_argv("deny", marker), env, work))
            await decide_when_pending(
                service,
                lambda rid: service.decide(rid, "deny", REVIEWER, reason="not on Fridays"),
            )
            await claude
            read = " ".join(models.results.get("deny", []))
            ok = not marker.exists() and "not on Fridays" in read
            failures += not ok
            print(
                f"permission_prompt deny: command ran={marker.exists()}, model read: "
                f"{read[:90]!r}  {'PASS' if ok else 'FAIL'}"
            )

            # 3. defer: the PreToolUse command hook defers; resume after the approval
            project = work / "project"
            (project / ".claude").mkdir(parents=True)
            hook = f"{PYTHON} -m bot.cli.main hook claude-code --timeout 3 --on-timeout defer"
            settings = {
                "hooks": {
                    "PreToolUse": [
                        {
                            "matcher": "Bash",
                            "hooks": [{"type": "command", "command": hook, "timeout": 10}],
                        }
                    ]
                }
            }
            (project / ".claude" / "settings.json").write_text(json.dumps(settings))
            marker = work / "deferred.marker"
            argv = [
                str(binary), "-p", f"RUN[defer]: touch {marker}",
                "--permission-mode", "bypassPermissions", "--output-format", "json",
            ]  # fmt: skip
            env_defer = {**env, "IS_SANDBOX": "1", "PYTHONPATH": str(ROOT)}
            first = await run(argv, env_defer, project)
            pending = await service.store.list_pending()
            deferred = first.get("stop_reason") == "tool_deferred"
            print(
                f"defer, first run: stop_reason={first.get('stop_reason')!r}, "
                f"pending={len(pending)}, command ran={marker.exists()}"
            )
            if pending:
                await service.decide(pending[0].id, "approve", REVIEWER)
            session = first.get("session_id")
            resumed = await run(
                [
                    str(binary),
                    "-p",
                    "--resume",
                    str(session),
                    "--permission-mode",
                    "bypassPermissions",
                    "--output-format",
                    "json",
                ],
                env_defer,
                project,
            )
            ok = deferred and len(pending) == 1 and marker.exists()
            failures += not ok
            print(
                f"defer, resumed: exit={resumed.get('exit')}, command ran={marker.exists()}  "
                f"{'PASS' if ok else 'FAIL'}"
            )
            if not ok:
                print(f"  first: {json.dumps(first)[:400]}\n  resumed: {json.dumps(resumed)[:400]}")
    finally:
        await models.stop()
        await redis.aclose()
        server.stop()
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default="2.1.295", help="the Claude Code version")
    args = parser.parse_args()
    return asyncio.run(main_async(args.version))


if __name__ == "__main__":
    sys.exit(main())
