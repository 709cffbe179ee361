"""Real-client checks: the real Claude Code / Codex CLI, a scripted model, the real bot, one table.

Run through `scripts/check-claude-code` and `scripts/check-codex` (not part of
`scripts/test`). Each run:

1. installs the CLI from the npm registry into a cache directory
   (`$XDG_CACHE_HOME/approval-bot/agents/<package>-<version>`, once);
2. starts a private `redis-server`, the bot (`approval-bot serve`, no Slack:
   requests are decided here through `approval-bot approve` / `deny`), and the
   scripted model APIs of `tests/support/fake_models.py`, all on 127.0.0.1;
3. writes the hooks with `approval-bot setup …` itself (Codex: trusted
   through its app-server), then runs the agent once per case, hook type and
   permission mode, with a model that runs `touch ran-<case>`;
4. prints a table: did the command run, did the reason reach the model, and (approve, command
   hooks) did the message the bot would post show, as *Why:*, what the model said right
   before its tool call (the command hook reads it from the session's transcript; the http
   hook never reads a path, so it has none).

A case the bot can answer (approve, deny, bad token, bad input, a store
outage) passes or fails. A case only the client decides (bot unreachable,
hook timeout shorter than the bot's wait, an untrusted Codex hook) is a
finding: it is reported as it is, never counted as a pass. Exit status: 0
every check passed, 1 a check failed, 2 could not run (e.g. no npm package).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_harness import (
    Harness,
    Outcome,
    cache_dir,
    edit_json,
    first_line,
    install,
    our_handlers,
    say,
    setup_hooks,
)

from bot.ops import embedded_redis

DEFAULT_VERSION = {"claude-code": "2.1.197", "codex": "0.171.0"}
HOOK_TIMEOUT = 30
SHORT_HOOK_TIMEOUT = 3
BOT_CASES = ("approve", "deny", "bad_token", "bad_input", "store_outage")
CLIENT_CASES = ("unreachable", "hook_timeout")


# -- cases ----------------------------------------------------------------------------------------


@dataclass
class Row:
    group: str  # hook type or event
    mode: str
    case: str
    outcome: Outcome
    verdict: str = ""
    cells: dict[str, str] = field(default_factory=dict)


def judge(case: str, outcome: Outcome, wants_reason: bool = False) -> str:
    """PASS / FAIL for what the bot can answer; FINDING for what only the client decides.
    `wants_reason`: a command hook, whose request must show the model's words as *Why:*."""
    if case == "approve":  # ran, and because the bot said so (not with the hook off)
        shown = outcome.reason_shown or not wants_reason
        return "PASS" if outcome.ran and outcome.hook_asked and shown else "FAIL"
    if case == "deny":
        return "PASS" if not outcome.ran and outcome.reason_seen else "FAIL"
    if case in BOT_CASES:
        return "PASS" if not outcome.ran else "FAIL"
    return "finding: runs (fails open)" if outcome.ran else "finding: blocks"


def describe(case: str, outcome: Outcome) -> str:
    if case == "approve":
        asked = "" if outcome.hook_asked else ", hook not asked"
        why = ", Why shown" if outcome.reason_shown else ""
        return ("ran" if outcome.ran else "did not run") + asked + why
    if outcome.ran:
        return "RAN"
    if case == "deny":
        return "blocked, reason reached the model" if outcome.reason_seen else "blocked, no reason"
    return "blocked"


def print_table(title: str, rows: list[Row], columns: list[str]) -> None:
    print(f"\n{title}\n")
    header = ["case", *columns]
    table = [header]
    cases = list(dict.fromkeys(r.case for r in rows))
    for case in cases:
        line = [case]
        for column in columns:
            found = [r for r in rows if r.case == case and f"{r.group} / {r.mode}" == column]
            line.append(
                f"{describe(case, found[0].outcome)} ({found[0].verdict})" if found else "-"
            )
        table.append(line)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for line in table[1:]:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) + " |")


def short_timeout(data: dict[str, Any]) -> None:
    """The hook-timeout finding: the agent gives up after 3 s, the bot would wait 60 s."""
    for handler in our_handlers(data):
        handler["timeout"] = SHORT_HOOK_TIMEOUT
        if handler.get("type") == "http":
            handler["url"] = handler["url"].replace("timeout=25", "timeout=60")
        else:
            handler["command"] = handler["command"].replace("--timeout 25", "--timeout 60")


# -- Claude Code ----------------------------------------------------------------------------------


MODES = {
    "default": ["--permission-mode", "default"],
    "acceptEdits": ["--permission-mode", "acceptEdits"],
    "bypassPermissions": ["--dangerously-skip-permissions"],
}


async def check_claude_code(h: Harness, cases: list[str], on_failure_block: bool) -> list[Row]:
    home = h.workdir("claude-home")
    env = h.base_env()
    env.update(
        HOME=str(home),
        ANTHROPIC_BASE_URL=h.models.url,
        ANTHROPIC_API_KEY="sk-ant-test",
        IS_SANDBOX="1",  # bypassPermissions as root
        DISABLE_TELEMETRY="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_ERROR_REPORTING="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
    )
    rows = []
    for hook_type in ("command", "http"):
        for mode, mode_args in MODES.items():
            for case in cases:
                project = h.workdir("claude", hook_type, mode, case)
                setup_argv = [
                    "--scope",
                    "project",
                    "--project",
                    str(project),
                    "--type",
                    hook_type,
                    "--timeout",
                    str(HOOK_TIMEOUT),
                ]
                url = h.dead_url if case == "unreachable" else h.bot.url
                if hook_type == "http":
                    setup_argv += ["--url", url]
                if on_failure_block:
                    setup_argv.append("--on-failure-block")
                text = setup_hooks("claude-code", setup_argv, {**env, "APPROVALS_URL": url})
                settings = project / ".claude" / "settings.json"
                if not settings.exists():
                    raise RuntimeError(f"setup wrote no settings: {text}")
                if case == "hook_timeout":
                    edit_json(settings, short_timeout)

                def argv(prompt: str, cwd: Path, mode_args: list[str] = mode_args) -> list[str]:
                    return [str(h.binary), "-p", prompt, *mode_args, "--output-format", "json"]

                outcome = await h.run_case(case, argv, env, project)
                verdict = judge(case, outcome, wants_reason=hook_type == "command")
                row = Row(hook_type, mode, case, outcome, verdict)
                rows.append(row)
                say(
                    f"  {hook_type:7} {mode:17} {case:13} {describe(case, outcome):35} "
                    f"{row.verdict:28} {outcome.seconds:5.1f}s  model read: "
                    f"{first_line(outcome.model_read, 70)}"
                )
    return rows


async def permission_request_headless(h: Harness) -> Row:
    """PermissionRequest under `claude -p`: is the hook asked at all?"""
    home = h.workdir("claude-home")
    env = h.base_env()
    env.update(
        HOME=str(home),
        ANTHROPIC_BASE_URL=h.models.url,
        ANTHROPIC_API_KEY="sk-ant-test",
        DISABLE_TELEMETRY="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
    )
    project = h.workdir("claude", "permission-request")
    setup_hooks(
        "claude-code",
        [
            "--scope",
            "project",
            "--project",
            str(project),
            "--event",
            "PermissionRequest",
            "--timeout",
            str(HOOK_TIMEOUT),
        ],
        env,
    )

    def argv(prompt: str, cwd: Path) -> list[str]:
        return [
            str(h.binary),
            "-p",
            prompt,
            "--permission-mode",
            "default",
            "--output-format",
            "json",
        ]

    outcome = await h.run_case("approve", argv, env, project)
    verdict = "finding: hook never asked" if not outcome.hook_asked else "hook asked"
    return Row("PermissionRequest", "default", "approve", outcome, verdict)


# -- Codex ----------------------------------------------------------------------------------------


def codex_config(home: Path, models_url: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        'model = "fake-model"\n'
        'model_provider = "fake"\n'
        "[model_providers.fake]\n"
        'name = "fake"\n'
        f'base_url = "{models_url}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "FAKE_MODEL_KEY"\n'
    )


async def check_codex(h: Harness, cases: list[str]) -> tuple[list[Row], list[str]]:
    rows: list[Row] = []
    notes: list[str] = []
    variants = [
        ("PreToolUse", "bypass", ["--dangerously-bypass-approvals-and-sandbox"], cases),
        (
            "PermissionRequest",
            "approve-for-me",
            ["--approve-for-me"],
            [c for c in cases if c != "bad_input"],
        ),
    ]
    for event, mode, mode_args, event_cases in variants:
        for case in [*event_cases, "untrusted"] if event == "PreToolUse" else event_cases:
            project = h.workdir("codex", event, case, "project")
            codex_home = h.workdir("codex", event, case, "home")
            codex_config(codex_home, h.models.url)
            env = h.base_env()
            env.update(CODEX_HOME=str(codex_home), FAKE_MODEL_KEY="x", HOME=str(codex_home.parent))
            setup_argv = [
                "--scope",
                "user",
                "--project",
                str(project),
                "--event",
                event,
                "--timeout",
                str(HOOK_TIMEOUT),
                "--codex",
                str(h.binary),
            ]
            if case in ("hook_timeout", "untrusted"):
                setup_argv.append("--no-trust")
            text = setup_hooks("codex", setup_argv, env)
            hooks_json = codex_home / "hooks.json"
            if case == "hook_timeout":
                edit_json(hooks_json, short_timeout)
                text += trust_as_is(hooks_json, project, h.binary, env)
            if case == "untrusted":
                check = setup_hooks(
                    "codex", ["--check", "--project", str(project), "--codex", str(h.binary)], env
                )
                flagged = [line for line in check.splitlines() if "untrusted in Codex" in line]
                notes.append(
                    "untrusted hook: `approval-bot setup codex --check` says: "
                    + (first_line(flagged[0], 160) if flagged else "NOTHING (not detected)")
                )
            elif "Codex trusts the hook" not in text and case != "hook_timeout":
                notes.append(f"{event} {case}: setup did not trust the hook: {first_line(text)}")
            escalate = event == "PermissionRequest"

            def argv(
                prompt: str, cwd: Path, mode_args: list[str] = mode_args, escalate: bool = escalate
            ) -> list[str]:
                if escalate:  # the model asks to run outside the sandbox: a PermissionRequest
                    prompt = prompt.replace("RUN[", "RUN-ESCALATED[", 1)
                return [str(h.binary), "exec", "--skip-git-repo-check", *mode_args, prompt]

            outcome = await h.run_case(case, argv, env, project)
            verdict = (
                "finding: runs (hook silently off)"
                if case == "untrusted" and outcome.ran
                else "finding: blocks"
                if case == "untrusted"
                else judge(case, outcome, wants_reason=True)
            )
            rows.append(Row(event, mode, case, outcome, verdict))
            say(
                f"  {event:17} {case:13} {describe(case, outcome):35} {verdict:30} "
                f"{outcome.seconds:5.1f}s  model read: {first_line(outcome.model_read, 70)}"
            )
    return rows, notes


def trust_as_is(hooks_json: Path, project: Path, codex: Path, env: dict[str, str]) -> str:
    """Trust the hooks file as edited (setup would rewrite it), through Codex's app-server."""
    import io

    from bot.agents.codex_app_server import trust_our_hooks

    data = json.loads(hooks_json.read_text())
    wanted = [
        (h["command"], g.get("matcher"))
        for groups in data["hooks"].values()
        for g in groups
        for h in g["hooks"]
    ]
    out = io.StringIO()
    trust_our_hooks(hooks_json, project, wanted, str(codex), out, Path(env["CODEX_HOME"]))
    return out.getvalue()


# -- main -----------------------------------------------------------------------------------------


async def main_async(args: argparse.Namespace) -> int:
    binary = install(args.agent, args.version)
    say(f"{args.agent} {args.version}: {binary}")
    cases = args.cases or [*BOT_CASES, *CLIENT_CASES]
    runs = cache_dir() / "runs"  # not under /tmp: Claude Code refuses writes below /tmp here
    runs.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"check-{args.agent}-", dir=runs))
    try:
        async with Harness(args.agent, binary, work) as h:
            if args.agent == "claude-code":
                rows = await check_claude_code(h, cases, args.on_failure_block)
                extra = await permission_request_headless(h) if not args.cases else None
                columns = [f"{t} / {m}" for t in ("command", "http") for m in MODES]
                print_table(
                    f"Claude Code {args.version}, `claude -p`, PreToolUse hook written by "
                    f"`approval-bot setup claude-code` (hook timeout {HOOK_TIMEOUT} s"
                    + (', onFailure "block"' if args.on_failure_block else "")
                    + ")",
                    rows,
                    columns,
                )
                if extra is not None:
                    print(
                        f"\nPermissionRequest hook under `claude -p --permission-mode default`: "
                        f"{extra.verdict}; command {'ran' if extra.outcome.ran else 'not run'}; "
                        f"model read: {first_line(extra.outcome.model_read, 120)}"
                    )
                    rows.append(extra)
            else:
                rows, notes = await check_codex(h, cases)
                columns = ["PreToolUse / bypass", "PermissionRequest / approve-for-me"]
                print_table(
                    f"Codex {args.version}, `codex exec`, hooks written and trusted by "
                    f"`approval-bot setup codex` (hook timeout {HOOK_TIMEOUT} s)",
                    rows,
                    columns,
                )
                for note in notes:
                    print(f"\n{note}")
            print("\nWhat the model read (the tool result), per row:")
            for row in rows:
                if row.case != "approve":
                    asked = "bot asked" if row.outcome.hook_asked else "bot not asked"
                    print(
                        f"  {row.group} / {row.mode} / {row.case} ({asked}): "
                        f"{first_line(row.outcome.model_read, 150)}"
                    )
            ids = [r for r in rows if r.outcome.call_id and r.group == "PermissionRequest"]
            for row in ids[:1]:
                print(
                    f"\nPermissionRequest call id (derived, no tool_use_id): {row.outcome.call_id}"
                )
    finally:
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    failed = [r for r in rows if r.verdict == "FAIL"]
    findings = [r for r in rows if r.verdict.startswith("finding: runs")]
    print(
        f"\n{len(rows) - len(failed) - len(findings)} checks as expected, {len(failed)} failed, "
        f"{len(findings)} fail-open findings (client-side)"
    )
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("agent", choices=("claude-code", "codex"))
    parser.add_argument("--version", help="the CLI version (default: the one verified)")
    parser.add_argument(
        "--case",
        dest="cases",
        action="append",
        choices=(*BOT_CASES, *CLIENT_CASES),
        help="run only this case (repeatable)",
    )
    parser.add_argument(
        "--on-failure-block",
        action="store_true",
        help='Claude Code: add "onFailure": "block" to the hooks (2.1.295 and later)',
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    args.version = args.version or DEFAULT_VERSION[args.agent]
    try:
        return asyncio.run(main_async(args))
    except KeyboardInterrupt:
        return 130
    except (RuntimeError, embedded_redis.NoRedisServer) as e:
        print(f"check-{args.agent}: {e}", flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
