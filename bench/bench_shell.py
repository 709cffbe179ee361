"""Benchmark: the shell-aware policy — what parsing and judging a command costs.

    .venv/bin/python -m bench.bench_shell                      # corpus, parse, hook
    .venv/bin/python -m bench.bench_shell --part parse         # one part
    .venv/bin/python -m bench.bench_shell --part hook --tree /path/to/old/checkout --rules regex
    .venv/bin/python -m bench.bench_shell --part parsers       # needs bashlex importable

Parts:

- `corpus`: the confusion table of the corpora in tests/approvals/internal/shell/ (evasions,
everyday
  read-only and writing commands) under the example policy: expected against decided.
- `parse`: `analyse` (parse + normalise, uncached) and `Policy.evaluate` under the example
  policy (everything, the cache emptied first) — p50 / p99 / max of this thread's CPU time —
  for every everyday command of the corpora, and for hostile inputs of 1 KB, 31 KB (just
  under the size cap) and 100 KB in ten shapes (tree-sitter-bash is quadratic on some:
  `a | a | …`); the bound is what matters there: the time spent on the event loop is capped
  by the size cap, the parse budget and the walk's node and command caps
  (approvals/_internal/shell/parse.py).
- `risks`: what finding a request's risk hints costs at create (`draft_request` with and
  without them, nothing cached: a non-shell tool, every everyday command, hostile inputs
  of 31 KB and 100 KB) and drawing a message with its risk lines and parsed view (cold and
  warm, against the same request without risk lines).
- `hook`: a policy-answered hook call through `approval-bot serve` (own process, Slack off,
  embedded Redis): sequential `POST /hooks/claude-code` of a Bash PreToolUse on one
  keep-alive connection; wall time per call and the bot's CPU time per call. `--tree`
  runs the serve of another checkout (the code before the change, for before/after);
  `--rules shell` answers with the read-only rule, `--rules regex` with a regex rule as
  policies were written before (the same command, the same allow).
- `parsers`: tree-sitter-bash against bashlex: parse failures on the corpora's commands
  that `bash -n` accepts, simple commands found on labelled constructs, and speed.

Prints tables, then one JSON line. See bench/README.md, "The shell-aware policy".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from bench.common import free_port, machine, redis_server, summarize_ms, table

ROOT = Path(__file__).resolve().parents[1]
SHELL = ROOT / "tests" / "approvals" / "internal" / "shell"
TOKEN = "bench-shell-token"
HOOK_COMMAND = "git status && git diff --stat | head -20"
RULES = {
    "shell": (SHELL / "example_policy.yaml").read_text(),
    "regex": """\
routes:
  default: {channel: C0APPROVALS}
rules:
  - name: status-and-diff
    match: {tool: Bash, arguments: {command: '^git (status|diff)\\b[^;&|]*(&& git (status|diff)\\b[^;&|]*)?(\\| head( -\\d+)?)?$'}}
    action: allow
""",  # noqa: E501
}


# -- corpora ------------------------------------------------------------------------------


def corpora() -> dict[str, list[tuple[str | list[str], str]]]:
    """Each corpus: (command or argv, expected outcome)."""
    evasions = yaml.safe_load((SHELL / "evasions.yaml").read_text())

    def lines(name: str) -> list[str]:
        text = (SHELL / name).read_text()
        return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]

    return {
        "evasions": [(c.get("cmd") or c["argv"], c["expect"]) for c in evasions],
        "everyday read-only": [(c, "allow") for c in lines("benign_read_only.txt")],
        "everyday writes": [(c, "ask") for c in lines("benign_writes.txt")],
    }


def event(command: str | list[str]) -> Any:
    from approvals.models import ApprovalEvent

    if isinstance(command, str):
        return ApprovalEvent(kind="command", tool_name="Bash", command=command, cwd="/srv/app")
    return ApprovalEvent(
        kind="command", tool_name="Bash", arguments={"command": command}, cwd="/srv/app"
    )


def example_policy() -> Any:
    from approvals._internal.policy_file import load_policy

    return load_policy(SHELL / "example_policy.yaml")


def part_corpus() -> dict[str, Any]:
    policy = example_policy()
    outcomes = ("deny", "ask", "allow")
    confusion: dict[str, Counter[str]] = {o: Counter() for o in outcomes}
    per_corpus: dict[str, dict[str, int]] = {}
    wrong: list[str] = []
    for name, cases in corpora().items():
        right = 0
        for command, expected in cases:
            decided = policy.evaluate(event(command)).action
            confusion[expected][decided] += 1
            right += decided == expected
            if decided != expected:
                wrong.append(f"{name}: expected {expected}, got {decided}: {command!r}")
        per_corpus[name] = {"cases": len(cases), "as_expected": right}
    rows = [[f"expected {e}", *(confusion[e][d] for d in outcomes)] for e in outcomes]
    print("Corpus confusion table (example policy; rows expected, columns decided)")
    print(table(["", "deny", "ask", "allow"], rows))
    print(table(["corpus", "cases", "as expected"],
                [[n, v["cases"], v["as_expected"]] for n, v in per_corpus.items()]))  # fmt: skip
    for line in wrong:
        print("  ", line)
    print()
    return {
        "confusion": {e: dict(confusion[e]) for e in outcomes},
        "corpora": per_corpus,
        "mismatches": wrong,
    }


# -- parse and evaluate ----------------------------------------------------------------------


def hostile(size: int) -> dict[str, str]:
    """Ten shapes of hostile input, `size` bytes each."""
    rng = random.Random(size)

    def fill(unit: str) -> str:
        return (unit * (size // len(unit) + 1))[:size]

    return {
        "pipe chain (a | a | …)": fill("a | "),
        "syntax-error soup": fill(")(;;&&|| "),
        "$( nesting": fill("$("),
        "( nesting": fill("("),
        "; chain": fill("ls -la x; "),
        "quotes": fill("'a'\"b\"$'c'"),
        "brace expansions": fill("{a,b}"),
        "backslashes": fill("\\"),
        "heredoc body": "cat > f <<'EOF'\n" + fill("line of text $x\n") + "\nEOF\n",
        "random shell bytes": "".join(rng.choice("ab $()'\"{};|&<>\\`\n") for _ in range(size)),
    }


def each(fn: Callable[[Any], Any], items: Sequence[Any], rounds: int) -> list[float]:
    """CPU seconds of `fn(item)` for every item, `rounds` times over."""
    out = []
    for _ in range(rounds):
        for item in items:
            started = time.thread_time()
            fn(item)
            out.append(time.thread_time() - started)
    return out


def part_parse(rounds: int) -> dict[str, Any]:
    from approvals._internal.shell import view
    from approvals._internal.shell.normalise import analyse

    policy = example_policy()

    def evaluate(item: Any) -> None:
        view._cached.cache_clear()
        policy.evaluate(item)

    everyday = [c for name, cases in corpora().items() if name != "evasions" for c, _ in cases]
    for command in everyday[:50]:  # warm up
        analyse(command)
    figures: dict[str, Any] = {}
    rows = []
    events = [event(c) for c in everyday]
    samples_a = each(analyse, everyday, rounds)
    samples_e = each(evaluate, events, rounds)
    cached = each(policy.evaluate, events, 1)
    figures["everyday"] = {
        "commands": len(everyday),
        "analyse": summarize_ms(samples_a),
        "evaluate": summarize_ms(samples_e),
        "evaluate_cached": summarize_ms(cached),
    }
    rows.append([f"everyday ({len(everyday)} commands)", *_cols(samples_a, samples_e), "-"])
    rows.append(["everyday, parse cached", "-", "-", "-",
                 *_cols([], cached)[3:], "-"])  # fmt: skip
    for size, repeat in ((1024, 20), (31 * 1024, 5), (100 * 1024, 5)):
        for shape, text in hostile(size).items():
            a = each(analyse, [text], repeat)
            e = each(evaluate, [event(text)], repeat)
            parsed = analyse(text)
            why = "; ".join(parsed.problems)[:48] or ("analysable" if parsed.analysable else "-")
            figures[f"{size // 1024}KB {shape}"] = {
                "analyse": summarize_ms(a),
                "evaluate": summarize_ms(e),
                "nodes": parsed.nodes,
                "outcome": why,
            }
            rows.append([f"{size // 1024:>3} KB {shape}", *_cols(a, e), why])
    print("Parse + evaluate, CPU ms of this thread (analyse: parse and normalise; evaluate:")
    print("the whole example policy, nothing cached: what a hook call holds the event loop for)")
    print("31 KB is just under the size cap (parse.MAX_BYTES); 100 KB is over it.")
    print(table(["input", "analyse p50", "p99", "max", "evaluate p50", "p99", "max", "outcome"],
                rows))  # fmt: skip
    worst = max(v["evaluate"]["max_ms"] for k, v in figures.items() if "KB" in k)
    print(f"worst evaluate of any hostile input: {worst:.2f} ms\n")
    figures["worst_hostile_evaluate_ms"] = worst
    return figures


def _cols(a: Sequence[float], e: Sequence[float]) -> list[Any]:
    sa, se = summarize_ms(a) if a else {}, summarize_ms(e) if e else {}
    return [sa.get("p50_ms"), sa.get("p99_ms"), sa.get("max_ms"),
            se.get("p50_ms"), se.get("p99_ms"), se.get("max_ms")]  # fmt: skip


# -- risks at create, and drawing them ----------------------------------------------------


def part_risks(rounds: int) -> dict[str, Any]:
    """What the risk hints cost: `draft_request` (what `ApprovalService.create` runs
    on the event loop) with and without finding the risks, for a non-shell tool, the
    everyday commands and hostile ones; then the message drawn with risk lines and the
    parsed view, against the same request drawn without them."""
    from datetime import UTC, datetime
    from unittest.mock import patch

    from approvals._internal import service as service_module
    from approvals._internal.policy import Policy
    from approvals._internal.service import draft_request
    from approvals._internal.shell import view
    from approvals.models import ApprovalEvent
    from bot.masking.masker import clear_cache
    from bot.slack.render import risk_lines
    from bot.slack.render.request_message import request_message

    now = datetime.now(UTC)
    policies = {"default policy": Policy(), "example policy": example_policy()}
    everyday = [c for name, cases in corpora().items() if name != "evasions" for c, _ in cases]
    tool = ApprovalEvent(tool_name="deploy", arguments={"env": "prod", "replicas": 3})
    cases: dict[str, list[Any]] = {
        "non-shell tool": [tool],
        f"everyday ({len(everyday)} commands)": [event(c) for c in everyday],
        "CI=1 timeout 5 env rm -fr build": [event("CI=1 timeout 5 env rm -fr build")],
        **{f"{k // 1024} KB {shape}": [event(text)]
           for k in (31 * 1024, 100 * 1024)
           for shape, text in hostile(k).items()
           if shape in ("pipe chain (a | a | …)", "syntax-error soup", "; chain")},
    }  # fmt: skip
    figures: dict[str, Any] = {}
    rows = []
    for policy_name, policy in policies.items():

        def draft(item: Any, policy: Any = policy) -> None:
            view._cached.cache_clear()  # nothing cached: a new command
            draft_request(policy, item, now=now)

        for name, events in cases.items():
            repeat = rounds if len(events) > 1 else rounds * 20
            with_risks = each(draft, events, repeat)
            with (
                patch.object(service_module, "request_risks", lambda e, a=None: ()),
                patch.object(service_module, "shell_analysis", lambda e: None),
            ):
                without = each(draft, events, repeat)
            a, b = summarize_ms(without), summarize_ms(with_risks)
            figures[f"{policy_name}: {name}"] = {"without_risks": a, "with_risks": b}
            rows.append([policy_name, name, a["p50_ms"], a["max_ms"], b["p50_ms"], b["max_ms"]])
    print("draft_request (ApprovalService.create's part on the event loop), CPU ms, the parse")
    print("cache emptied before each call; without: no risks found and the command parsed only")
    print("if a rule asks (as before the risk hints)")
    print(table(["policy", "input", "without p50", "max", "with risks p50", "max"], rows))
    # Drawing the message.
    draw_rows = []
    drawn = {
        "non-shell tool": draft_request(Policy(), tool, now=now)[0],
        "Bash, 1 risk + parsed view": draft_request(
            Policy(), event("CI=1 timeout 5 env rm -fr build"), now=now
        )[0],
        "Bash, 8 risks + 11 commands": draft_request(
            Policy(),
            event(" && ".join(
                [f"timeout 5 rm -rf d{i}" for i in range(3)]
                + [f"git push -f origin b{i}" for i in range(2)]
                + [f"nice make t{i}" for i in range(6)]
            )),
            now=now,
        )[0],
        "Bash, 31 KB ; chain": draft_request(
            Policy(), event(hostile(31 * 1024)["; chain"]), now=now
        )[0],
    }  # fmt: skip
    for name, request in drawn.items():

        def cold(req: Any) -> None:
            clear_cache()
            view._cached.cache_clear()
            request_message(req)

        samples = {
            "cold": each(cold, [request], rounds * 50),
            "warm": each(request_message, [request], rounds * 50),
        }
        with (
            patch.object(risk_lines, "risk_blocks", lambda v: []),
            patch.object(risk_lines, "parsed_blocks", lambda v: []),
        ):
            samples["cold, without"] = each(cold, [request], rounds * 50)
        figures[f"draw: {name}"] = {k: summarize_ms(v) for k, v in samples.items()}
        draw_rows.append(
            [name, *(summarize_ms(v)["p50_ms"] for v in samples.values()),
             summarize_ms(samples["cold"])["max_ms"]]
        )  # fmt: skip
    print("request_message: CPU ms (cold: the masking and parse caches emptied first, as for a")
    print("new request's post; warm: its update or App Home redraw; without: no risk lines and")
    print("no parsed view drawn, as before the risk hints)")
    print(table(["request", "cold p50", "warm p50", "cold without p50", "cold max"], draw_rows))
    print()
    return figures


# -- the hook endpoint -----------------------------------------------------------------------


def process_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def drive(port: int, calls: int, warm: int) -> tuple[list[float], int]:
    url = f"http://127.0.0.1:{port}/hooks/claude-code?timeout=30"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    body = {
        "session_id": "bench-shell",
        "cwd": "/srv/app",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": HOOK_COMMAND},
        "permission_mode": "default",
    }
    times: list[float] = []
    allowed = 0
    async with aiohttp.ClientSession() as http:
        for i in range(warm + calls):
            payload = json.dumps({**body, "tool_use_id": f"toolu_{i}_{time.monotonic_ns()}"})
            started = time.perf_counter()
            async with http.post(url, data=payload, headers=headers) as resp:
                answer = await resp.json()
            elapsed = time.perf_counter() - started
            if i >= warm:
                times.append(elapsed)
                allowed += answer["hookSpecificOutput"]["permissionDecision"] == "allow"
    return times, allowed


def part_hook(tree: Path, rules: str, calls: int, redis_url: str) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-shell-"))
    policy = workdir / "policy.yaml"
    policy.write_text(RULES[rules])
    port = free_port()
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVALS_", "REDIS"))
    }
    env.update(
        REDIS_URL=redis_url,
        PORT=str(port),
        APPROVALS_PREFIX=f"bench-shell-{port}",
        APPROVALS_API_TOKENS=f"bench:{TOKEN}",
        APPROVALS_POLICY_FILE=str(policy),
        APPROVALS_DEFAULT_CHANNEL="C0APPROVALS",
        LOG_LEVEL="WARNING",
        PYTHONPATH=str(tree),
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "bot.cli.main", "serve"],
        cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        from bench.bench_cli import wait_healthy

        wait_healthy(port, server)
        cpu_before = process_cpu(server.pid)
        times, allowed = asyncio.run(drive(port, calls, warm=200))
        cpu = (process_cpu(server.pid) - cpu_before) / (calls + 200)
    finally:
        server.terminate()
        server.wait(timeout=20)
        shutil.rmtree(workdir, ignore_errors=True)
    figures = {
        "tree": str(tree),
        "rules": rules,
        "command": HOOK_COMMAND,
        "allowed": allowed,
        "calls": calls,
        "wall": summarize_ms(times),
        "bot_cpu_ms_per_call": round(cpu * 1000, 3),
    }
    print(f"Hook call answered by the policy ({rules} rule), serve from {tree}")
    print(table(["figure", "p50 ms", "p99 ms", "max ms", "bot CPU ms/call", "allowed"], [[
        "POST /hooks/claude-code", figures["wall"]["p50_ms"], figures["wall"]["p99_ms"],
        figures["wall"]["max_ms"], figures["bot_cpu_ms_per_call"], f"{allowed}/{calls}",
    ]]))  # fmt: skip
    print()
    return figures


# -- parsers ------------------------------------------------------------------------------

#: Constructs with the programs a parser must find in them (first words, in any order).
LABELLED: list[tuple[str, list[str]]] = [
    ("a | b && c; d || e & f", ["a", "b", "c", "d", "e", "f"]),
    ("(a; b) && { c; }", ["a", "b", "c"]),
    ("if a; then b; elif c; then d; else e; fi", ["a", "b", "c", "d", "e"]),
    ("for x in 1 2; do a; done", ["a"]),
    ("while a; do b; done", ["a", "b"]),
    ("case $x in 1) a;; *) b;; esac", ["a", "b"]),
    ("f() { a; }", ["a"]),
    ("function g { a; }", ["a"]),
    ("echo $(a) `b`", ["echo", "a", "b"]),
    ("echo $((1 + $(a)))", ["echo", "a"]),
    ("diff <(a) >(b)", ["diff", "a", "b"]),
    ("x=$(a)", ["a"]),
    ("echo ${x:-$(a)}", ["echo", "a"]),
    ("[[ -f x ]] && a", ["a"]),
    ("cat <<EOF\nbody\nEOF\na", ["cat", "a"]),
    ("cat <<'EOF' | a\n$(x)\nEOF", ["cat", "a"]),
    ("a <<< word | b", ["a", "b"]),
    ("a\\\n-rf", ["a-rf"]),  # a line continuation joins the words
    ("! a | b", ["a", "b"]),
    ("a 2>&1 | b &> /dev/null", ["a", "b"]),
    ("coproc a", ["coproc"]),
    ("time a", ["time"]),
    ("for ((i=0;i<3;i++)); do a; done", ["a"]),
    ("select x in 1; do a; done", ["a"]),
    ("until a; do b; done", ["a", "b"]),
    ("a; # b\nc", ["a", "c"]),
    ("declare -x A=$(a)", ["declare", "a"]),
    ('echo "$(a "$(b)")"', ["echo", "a", "b"]),
    ("$'a' x", ["a"]),
    ("{ a; } > out", ["a"]),
]


def _bashlex_programs(text: str) -> list[str]:
    import bashlex

    found: list[str] = []

    def walk(node: Any) -> None:
        if node.kind == "command":
            words = [p for p in node.parts if p.kind == "word"]
            if words:
                found.append(words[0].word.strip("'$"))
        for attr in ("parts", "list"):
            for child in getattr(node, attr, None) or []:
                walk(child)
        command = getattr(node, "command", None)
        if command is not None and hasattr(command, "kind"):
            walk(command)

    for tree in bashlex.parse(text):
        walk(tree)
    return found


def _ts_programs(text: str) -> list[str]:
    import tree_sitter
    import tree_sitter_bash

    parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))
    source = text.encode()
    tree = parser.parse(source)
    found = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.type == "command":
            name = node.child_by_field_name("name")
            if name is not None:
                found.append(source[name.start_byte : name.end_byte].decode().strip("'$"))
        elif node.type == "declaration_command":
            found.append(source[node.start_byte : node.end_byte].decode().split()[0])
        stack.extend(reversed(node.children))
    if tree.root_node.has_error:
        raise SyntaxError("tree-sitter: syntax error")
    return found


def part_parsers() -> dict[str, Any]:
    try:
        import bashlex  # noqa: F401
    except ImportError:
        print("parsers: bashlex is not importable (pip install bashlex to compare)\n")
        return {"skipped": "bashlex not importable"}
    import sys as _sys

    _sys.setrecursionlimit(10_000)
    commands = [c for cases in corpora().values() for c, _ in cases if isinstance(c, str)]
    valid = [c for c in commands if subprocess.run(  # bash -n: parse only, never run
        ["bash", "-n", "-c", c], capture_output=True, check=False).returncode == 0]  # fmt: skip
    results: dict[str, Any] = {"corpus_commands": len(commands), "bash_accepts": len(valid)}
    rows = []
    for name, fn in (("tree-sitter-bash", _ts_programs), ("bashlex", _bashlex_programs)):
        failures = 0
        for command in valid:
            try:
                fn(command)
            except Exception:
                failures += 1
        right = 0
        for text, expected in LABELLED:
            try:
                right += sorted(fn(text)) == sorted(expected)
            except Exception:
                pass
        speed = {}
        for label, text in (
            ("everyday", HOOK_COMMAND),
            ("1KB ; chain", "ls -la x; " * 102),
            ("1KB $( nesting", "$(" * 150 + "ls" + ")" * 150),
            ("100KB ; chain", "ls -la x; " * 10240),
        ):
            samples = []
            for _ in range(3 if "100KB" in label else 20):
                started = time.perf_counter()
                try:
                    fn(text)
                except Exception:
                    pass
                samples.append(time.perf_counter() - started)
            speed[label] = summarize_ms(samples)["p50_ms"]
        results[name] = {
            "parse_failures_on_valid": failures,
            "labelled_right": right,
            "labelled": len(LABELLED),
            "p50_ms": speed,
        }
        rows.append([name, f"{failures}/{len(valid)}", f"{right}/{len(LABELLED)}",
                     *speed.values()])  # fmt: skip
    print("Parsers: failures on commands bash -n accepts; constructs whose commands are all")
    print("found; p50 ms of a parse (tree-sitter: parse + walk for command names)")
    print(table(["parser", "fails", "constructs", "everyday", "1KB ;", "1KB $(", "100KB ;"],
                rows))  # fmt: skip
    print()
    return results


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["all", "corpus", "parse", "risks", "hook", "parsers"],
                        default="all")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="rounds over the everyday commands")
    parser.add_argument("--calls", type=int, default=2000, help="hook calls timed")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout `serve` runs from")
    parser.add_argument("--rules", choices=sorted(RULES), default="shell")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"machine": machine()}
    if args.part in ("all", "corpus"):
        result["corpus"] = part_corpus()
    if args.part in ("all", "parse"):
        result["parse"] = part_parse(args.rounds)
    if args.part in ("all", "risks"):
        result["risks"] = part_risks(args.rounds)
    if args.part in ("all", "hook"):
        with redis_server(None, embedded=True) as url:
            result["hook"] = part_hook(args.tree.resolve(), args.rules, args.calls, url)
    if args.part == "parsers":
        result["parsers"] = part_parsers()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
