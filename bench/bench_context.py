"""Benchmark: a call's context. What reading the transcript adds to the command hook, and what
drawing a big diff costs.

    .venv/bin/python -m bench.bench_context [--runs 15] [--transcript-mb 50]

- **The command hook's wall time** (`approval-bot hook claude-code`, a process per call as the
  agent runs it, against a stand-in for the bot's hook endpoint on loopback that allows at
  once, so only the hook's own work is timed): with no transcript; with a transcript of
  `--transcript-mb` MB whose call and prompt are at its end (the usual case); and with one
  whose prompt is out of reach (the read stops at `MAX_SCAN_BYTES`); each with the file the
  `Edit` changes read too. Median and p95 over `--runs`, then the excerpt alone, in process.
- **Drawing a 2,000-line diff**: building it (`with_changes`: a Write of 2,000 lines over a
  file of 2,000 with an edit every 10th line, and a new 2,000-line file), then drawing the
  message (`request_message`: masking the diff, the first lines inline) and the Details modal
  (the whole diff masked, in sections) afresh each time.

Prints a table, then one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from approvals._internal.file_changes import Original, with_changes
from approvals.models import ApprovalEvent, ApprovalRequest
from bot.agents import transcripts
from bot.masking.masker import clear_cache
from bot.slack.render import modals
from bot.slack.render import request_message as blocks
from tests.support import transcripts as fixtures

ROOT = Path(__file__).resolve().parents[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# -- the command hook -----------------------------------------------------------------------


async def stand_in() -> tuple[web.AppRunner, int]:
    """The bot's hook endpoint, answering allow at once (the hook's own time is measured)."""

    async def allow(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(
            {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "allow",
                    "permissionDecisionReason": "ok",
                }
            }
        )

    app = web.Application(client_max_size=8 * 1024 * 1024)
    app.router.add_post("/hooks/claude-code", allow)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port


def big_transcript(directory: Path, megabytes: int, *, prompt_at_end: bool) -> Path:
    """`megabytes` of earlier session (assistant texts, tool results of 20 KB), then the
    fixture's last turn: from its prompt, or only its last step (the agent's words and the
    Edit), when the prompt is out of reach and the read stops at `MAX_SCAN_BYTES`."""
    lines = fixtures.text(fixtures.CLAUDE_EDIT).splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if '"content":"The retry test' in line)
    lines = lines[at:] if prompt_at_end else lines[-3:]
    text = {"type": "text", "text": "earlier work " * 40}
    result = {"type": "tool_result", "tool_use_id": "toolu_x", "content": "r" * 20_000}
    filler_text = json.dumps({"type": "assistant", "message": {"content": [text]}})
    filler_result = json.dumps({"type": "user", "message": {"content": [result]}})
    path = directory / f"t-{megabytes}-{prompt_at_end}.jsonl"
    with path.open("w") as f:
        written = 0
        while written < megabytes * 1024 * 1024:
            chunk = (filler_text + "\n") * 20 + filler_result + "\n"
            f.write(chunk)
            written += len(chunk)
        f.write("".join(lines))
    return path


async def hook_once(port: int, payload: dict[str, Any]) -> tuple[float, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVALS_"))}
    env.update(APPROVALS_URL=f"http://127.0.0.1:{port}", APPROVALS_TOKEN="bench-token")
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli.main", "hook", "claude-code", "--timeout", "30",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=env, cwd=ROOT,
    )  # fmt: skip
    out, _ = await proc.communicate(json.dumps(payload).encode())
    return time.perf_counter() - started, out.decode()


async def hook_figures(runs: int, megabytes: int) -> dict[str, Any]:
    runner, port = await stand_in()
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        project = work / "app"
        (project / "src").mkdir(parents=True)
        (project / "src" / "client.py").write_text(
            "import os\nimport time\n\nMAX_RETRIES = 3\n" + "# filler\n" * 2000
        )
        cases = {
            "no transcript": work / "missing.jsonl",
            f"{megabytes} MB, call and prompt at the end": big_transcript(
                work, megabytes, prompt_at_end=True
            ),
            f"{megabytes} MB, prompt out of reach": big_transcript(
                work, megabytes, prompt_at_end=False
            ),
        }
        try:
            for name, transcript in cases.items():
                payload = {
                    "session_id": "bench", "transcript_path": str(transcript),
                    "cwd": str(project), "hook_event_name": "PreToolUse", "tool_name": "Edit",
                    "tool_use_id": fixtures.CLAUDE_EDIT_CALL, "permission_mode": "default",
                    "tool_input": {"file_path": str(project / "src" / "client.py"),
                                   "old_string": "MAX_RETRIES = 3",
                                   "new_string": "MAX_RETRIES = 5"},
                }  # fmt: skip
                await hook_once(port, payload)  # warm the page cache
                times = []
                for _ in range(runs):
                    seconds, out = await hook_once(port, payload)
                    assert '"allow"' in out, out
                    times.append(seconds * 1000)
                deadline = time.monotonic() + 5
                start = time.perf_counter()
                found = transcripts.excerpt("claude-code", payload, deadline=deadline)
                excerpt_ms = (time.perf_counter() - start) * 1000
                figures[name] = {
                    "hook_median_ms": round(statistics.median(times), 1),
                    "hook_p95_ms": round(percentile(times, 0.95), 1),
                    "excerpt_ms": round(excerpt_ms, 2),
                    "scanned_bytes": found.scanned,
                    "reason_found": found.reason is not None,
                    "request_found": found.user_request is not None,
                }
        finally:
            await runner.cleanup()
    return figures


# -- drawing a big diff ---------------------------------------------------------------------


def timed(fn: Callable[[], Any], repeat: int) -> float:
    """Median milliseconds of `fn` over `repeat` runs, masking afresh each time."""
    times = []
    for _ in range(repeat):
        clear_cache()
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 2)


def diff_figures(repeat: int) -> dict[str, Any]:
    path = "/srv/app/src/big.py"
    old = "\n".join(f"    value_{i} = compute({i}, retries=3)  # step {i}" for i in range(2000))
    edited = "\n".join(
        f"    value_{i} = compute({i}, retries=5)  # step {i}" if i % 10 == 0 else line
        for i, line in enumerate(old.split("\n"))
    )
    cases = {
        "2,000-line file, every 10th line edited": (edited, {path: Original(True, old)}),
        "new 2,000-line file": (old, {path: Original(False)}),
    }
    figures: dict[str, Any] = {}
    for name, (content, originals) in cases.items():
        event = ApprovalEvent(
            kind="file", tool_name="Write", arguments={"file_path": path, "content": content},
            path=path, cwd="/srv/app",
        )  # fmt: skip
        built = with_changes(event, originals)
        assert built.context is not None
        (change,) = built.context.files
        request = ApprovalRequest(event=built, channel="C0BENCH")
        bare = ApprovalRequest(event=event, channel="C0BENCH")  # the same call, no context
        figures[name] = {
            "diff_lines": change.diff.count("\n") + 1,
            "added": change.added,
            "removed": change.removed,
            "build_ms": timed(lambda e=event, o=originals: with_changes(e, o), repeat),
            "message_ms": timed(lambda r=request: blocks.request_message(r), repeat),
            "message_without_context_ms": timed(lambda r=bare: blocks.request_message(r), repeat),
            "details_modal_ms": timed(lambda r=request: modals.details_modal(r), repeat),
            "modal_blocks": len(modals.details_modal(request)["blocks"]),
            "message_blocks": len(blocks.request_message(request)["blocks"]),
        }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="hook runs per case")
    parser.add_argument("--transcript-mb", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=30, help="draws per diff case")
    args = parser.parse_args()
    hooks = asyncio.run(hook_figures(args.runs, args.transcript_mb))
    diffs = diff_figures(args.repeat)
    print(f"\nCommand hook, `approval-bot hook claude-code` per Edit ({args.runs} runs each)\n")
    print(f"| {'transcript':38} | median ms | p95 ms | excerpt ms | read KiB | reason | request |")
    print(f"|{'-' * 40}|-----------|--------|------------|----------|--------|---------|")
    for name, f in hooks.items():
        reason = "yes" if f["reason_found"] else "no"
        asked = "yes" if f["request_found"] else "no"
        print(
            f"| {name:38} | {f['hook_median_ms']:9} | {f['hook_p95_ms']:6} | "
            f"{f['excerpt_ms']:10} | {f['scanned_bytes'] // 1024:8} | {reason:6} | {asked:7} |"
        )
    print(f"\nDrawing a 2,000-line diff (median of {args.repeat}, masking afresh)\n")
    print(
        f"| {'case':40} | diff lines | build ms | message ms | same, no context ms "
        "| modal ms | modal blocks |"
    )
    rule = "|".join("-" * w for w in (42, 12, 10, 12, 21, 10, 14))
    print(f"|{rule}|")
    for name, f in diffs.items():
        print(
            f"| {name:40} | {f['diff_lines']:10} | {f['build_ms']:8} | {f['message_ms']:10} | "
            f"{f['message_without_context_ms']:19} | {f['details_modal_ms']:8} | "
            f"{f['modal_blocks']:12} |"
        )
    print(json.dumps({"hook": hooks, "diff": diffs}))


if __name__ == "__main__":
    main()
