"""Benchmark: the `approval-bot` command as an agent runs it — a whole process each time.

    .venv/bin/python -m bench.bench_cli [--runs 10] [--redis-url URL]

Two figures, each over `--runs` fresh processes (p50, p99, max, min of the wall time
from spawn to exit, judged on the max; and each process's CPU time, which a loaded
machine inflates far less than the wall time):

- `approval-bot --help`: what every call pays before it does anything
  (interpreter start-up and the imports the parser needs). Target ≤ 150 ms.
- `approval-bot hook claude-code` answered by a policy rule over HTTP: a real
  `approval-bot serve` (its own process, Slack off) with a policy whose rule
  allows `Read`; the hook reads the Claude Code PreToolUse JSON on stdin, asks
  the bot through `APPROVALS_URL`, prints the allow. Target ≤ 300 ms.
- `approval-bot hook codex`, the same with Codex's PermissionRequest JSON (same bot;
  the rule allows it: `decision.behavior` allow). Target ≤ 300 ms.

Prints a table, then one JSON line. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    add_redis_arguments,
    free_port,
    machine,
    redis_server,
    summarize_ms,
    table,
    verdict,
)
from tests.support.credentials import API_TOKEN

HELP_TARGET_MS = 150.0
HOOK_TARGET_MS = 300.0
TOKEN = API_TOKEN
POLICY = """\
routes:
  default: {channel: C0APPROVALS}
rules:
  - name: reads
    action: allow
    match: {tool: Read}
"""
HOOK_INPUT = {
    "session_id": "bench",
    "cwd": "/srv/app",
    "hook_event_name": "PreToolUse",
    "tool_name": "Read",
    "tool_input": {"file_path": "/srv/app/README.md"},
    "permission_mode": "default",
}
CODEX_INPUT = {
    "session_id": "bench",
    "turn_id": "turn-1",
    "cwd": "/srv/app",
    "hook_event_name": "PermissionRequest",
    "model": "gpt-5-codex",
    "permission_mode": "default",
    "tool_name": "Read",
    "tool_input": {"file_path": "/srv/app/README.md"},
}


def command() -> list[str]:
    """The installed console script next to this interpreter (what agents run)."""
    script = Path(sys.executable).with_name("approval-bot")
    return [str(script)] if script.exists() else [sys.executable, "-m", "bot.cli.main"]


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVALS_", "REDIS"))
    }
    env.update(extra)
    return env


#: CPU seconds (user + system) of each process timed, by figure: on a loaded machine the
#: wall time mostly measures the queue for a core; the CPU time is what the command costs.
CPU: dict[str, list[float]] = {}


def timed(
    argv: list[str], env: dict[str, str], stdin: bytes = b"", *, figure: str = ""
) -> tuple[float, bytes]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, input=stdin, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()}")
    if figure:
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        CPU.setdefault(figure, []).append(cpu)
    return elapsed, done.stdout


def wait_healthy(port: int, proc: subprocess.Popen[bytes], within: float = 60) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("serve did not become healthy")


def bench_help(runs: int) -> list[float]:
    argv, env = [*command(), "--help"], clean_env()
    timed(argv, env)  # warm the page cache and .pyc files
    return [timed(argv, env, figure="help")[0] for _ in range(runs)]


def bench_hooks(runs: int, redis_url: str) -> dict[str, list[float]]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    policy = workdir / "policy.yaml"
    policy.write_text(POLICY)
    port = free_port()
    serve_env = clean_env(
        REDIS_URL=redis_url,
        PORT=str(port),
        APPROVALS_PREFIX=f"bench-cli-{port}",
        APPROVALS_API_TOKENS=f"bench:{TOKEN}",
        APPROVALS_POLICY_FILE=str(policy),
        LOG_LEVEL="WARNING",
    )
    server = subprocess.Popen(
        [*command(), "serve"], env=serve_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_healthy(port, server)
        hook_env = clean_env(APPROVALS_URL=f"http://127.0.0.1:{port}", APPROVALS_TOKEN=TOKEN)
        cases = [
            ("hook_rule_http", "claude-code", HOOK_INPUT),
            ("codex_rule_http", "codex", CODEX_INPUT),
        ]
        times: dict[str, list[float]] = {figure: [] for figure, _, _ in cases}
        for _, dialect, body in cases:
            argv = [*command(), "hook", dialect, "--timeout", "30"]
            payload = json.dumps({**body, "tool_use_id": f"warm-{dialect}"}).encode()
            _, out = timed(argv, hook_env, payload)
            specific = json.loads(out)["hookSpecificOutput"]
            decision = specific.get("permissionDecision") or specific["decision"]["behavior"]
            if decision != "allow":
                raise SystemExit(f"the rule did not answer {dialect}: {out.decode()}")
        for i in range(runs):  # the two dialects alternate: both see the same machine
            for figure, dialect, body in cases:
                argv = [*command(), "hook", dialect, "--timeout", "30"]
                payload = json.dumps({**body, "tool_use_id": f"call-{i}"}).encode()
                times[figure].append(timed(argv, hook_env, payload, figure=figure)[0])
        return times
    finally:
        server.terminate()
        server.wait(timeout=20)
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="processes per figure")
    add_redis_arguments(parser)
    args = parser.parse_args(argv)
    help_times = bench_help(args.runs)
    with redis_server(args.redis_url, embedded=args.embedded) as url:
        hook_times = bench_hooks(args.runs, url)
    figures: dict[str, Any] = {
        "help": summarize_ms(help_times),
        **{figure: summarize_ms(times) for figure, times in hook_times.items()},
        "cpu": {name: summarize_ms(times) for name, times in CPU.items()},
    }
    rows = []
    for name, label, target in (
        ("help", "approval-bot --help", HELP_TARGET_MS),
        ("hook_rule_http", "hook claude-code, rule answers, HTTP", HOOK_TARGET_MS),
        ("codex_rule_http", "hook codex, rule answers, HTTP", HOOK_TARGET_MS),
    ):
        s, cpu = figures[name], figures["cpu"][name]
        rows.append(
            [
                label,
                s["p50_ms"],
                s["p99_ms"],
                s["max_ms"],
                s["min_ms"],
                f"{cpu['p50_ms']:.0f} / {cpu['max_ms']:.0f}",
                f"≤ {target:g}",
                verdict(s["max_ms"] <= target),
            ]
        )
    load = os.getloadavg()
    print(
        f"{args.runs} processes each; wall time from spawn to exit, ms (target judged on the "
        f"max); CPU = the process's user + system time; load average {load[0]:.2f} "
        f"{load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs"
    )
    print(table(["command", "p50", "p99", "max", "min", "CPU p50 / max", "target", ""], rows))
    print(json.dumps({"bench": "cli", "runs": args.runs, **figures, "machine": machine()}))


if __name__ == "__main__":
    main()
