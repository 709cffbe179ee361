"""Benchmark: masking. What the secret rules cost, and how a maintained detector compares.

    .venv/bin/python -m bench.bench_masking [--repeat 200]

- `mask_text` on ordinary text (no secret; the common case), on every fake of the corpus
  (`tests/support/secret_corpus.py`), and on a 64 KiB hostile text (long runs of token
  characters, `mysql` and `password` repeated) that probes for slow patterns.
- A whole request message as a post sends it: rendered, masked as it is drawn (a
  `Masked` message: `outbound` passes it as it is); and the same message scanned
  whole by `outbound` as a plain dict (what every post cost before it was sent as drawn,
  and what any other payload of that size costs).
- `--rules`: each secret rule (`bot.masking.rules.RULES`) on its worst case: every hostile
  text of the corpus (`tests/support/secret_corpus.py` `HOSTILE_TEXTS`) at 80 KB picks the slowest
  for the rule, which is then timed at 1 MiB and 2 MiB, each in a child process stopped after
  `--limit` seconds (a quadratic pattern would take hours).
- `--loop-lag`: the event loop's longest stall (a 1 ms ticker's worst lateness) while a
  request with one 100 KB hostile argument is drawn as the dispatcher draws it for its post
  (`bot.slack.delivery.dispatcher._drawn`: on a worker thread when large, where it exists),
  then for its update and an App Home view (on the loop, as they are).
- If `detect-secrets` is importable (`pip install detect-secrets` or `bc-detect-secrets`;
  it is not a dependency), its regex plugins and its entropy plugins on the same corpus:
  how many fakes it finds, how many near misses it flags, and its time per line.

Prints a table, then one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest
from bot.masking.masker import clear_cache, mask_text, outbound
from bot.masking.rules import RULES, find, normalise
from bot.slack.render import request_message as blocks
from tests.support.secret_corpus import FAKES, HOSTILE_TEXTS, NEAR_MISSES

ORDINARY = "Deploy web to production with 3 replicas (task-42), see https://example.com/a?b=c " * 6
HOSTILE = ("A" * 4000 + " mysql -u x " + "password " * 200 + "-" * 3000 + "eyJ" * 500) * 4


def per_call_us(fn: Callable[[], Any], repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat * 1e6


def ours(repeat: int) -> dict[str, float]:
    corpus = [f.text for f in FAKES]
    request = ApprovalRequest(
        event=ApprovalEvent(
            tool_name="deploy",
            arguments={"service": "web", "env": {"DB_PASSWORD": "x" * 12}, "note": ORDINARY},
            command="kubectl rollout restart deploy/web",
        ),
        config=ApprovalConfig(),
        channel="C1",
    )

    def fresh(fn: Callable[[], Any]) -> Callable[[], Any]:
        """`fn` with bot.masking.masker's cache emptied first: the cost of masking afresh."""

        def run() -> Any:
            clear_cache()
            return fn()

        return run

    def render() -> Any:
        return outbound(blocks.request_message(request))

    drawn = dict(blocks.request_message(request))

    def scan() -> Any:
        return outbound(drawn)

    clear_cost = per_call_us(clear_cache, repeat)
    return {
        "ordinary_text_us": per_call_us(fresh(lambda: mask_text(ORDINARY)), repeat) - clear_cost,
        "ordinary_text_cached_us": per_call_us(lambda: mask_text(ORDINARY), repeat),
        "ordinary_text_chars": len(ORDINARY),
        "corpus_fake_us": per_call_us(fresh(lambda: [mask_text(t) for t in corpus]), 5)
        / len(corpus),
        "hostile_64k_ms": per_call_us(lambda: mask_text(HOSTILE), 3) / 1000,
        "hostile_chars": len(HOSTILE),
        "message_render_us": per_call_us(fresh(render), max(repeat // 4, 5)),
        "message_render_again_us": per_call_us(render, max(repeat // 4, 5)),
        "message_scan_us": per_call_us(fresh(scan), max(repeat // 4, 5)),
    }


def rule_id(index: int) -> str:
    return f"{RULES[index].name}-{index}"


def time_rule(index: int, hostile: str, size: int) -> float:
    """Seconds `find` takes with rule `index` alone on the hostile text `hostile` of `size`."""
    text = HOSTILE_TEXTS[hostile](size)
    start = time.perf_counter()
    find(text, (RULES[index],))
    return time.perf_counter() - start


def time_rule_bounded(index: int, hostile: str, size: int, limit: float) -> float | None:
    """`time_rule` in a child process, None if it had not finished after `limit` seconds."""
    code = (
        f"from bench.bench_masking import time_rule; print(time_rule({index}, {hostile!r}, {size}))"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=limit, check=True
        )
    except subprocess.TimeoutExpired:
        return None
    return float(done.stdout.strip())


def rules(limit: float, sizes: tuple[int, ...] = (1 << 20, 2 << 20)) -> dict[str, Any]:
    """Each rule's worst hostile text at 80 KB, and its time there and at `sizes`."""
    out: dict[str, Any] = {}
    for index in range(len(RULES)):
        worst, worst_s = "", -1.0
        for name in HOSTILE_TEXTS:
            seconds = time_rule(index, name, 80_000)
            if seconds > worst_s:
                worst, worst_s = name, seconds
        row: dict[str, Any] = {"worst": worst, "80KB_s": worst_s}
        for size in sizes:
            row[f"{size >> 20}MiB_s"] = time_rule_bounded(index, worst, size, limit)
        out[rule_id(index)] = row
        print(
            f"  {rule_id(index):24} {_seconds(worst_s):>9} {_row_sizes(row, sizes, limit)}"
            f"  ({worst})",
            flush=True,
        )
    return out


def _seconds(value: float | None, limit: float = 0.0) -> str:
    return f"> {limit:.0f} s" if value is None else f"{value * 1000:.1f} ms"


def _row_sizes(row: dict[str, Any], sizes: tuple[int, ...], limit: float) -> str:
    return " ".join(f"{_seconds(row[f'{size >> 20}MiB_s'], limit):>9}" for size in sizes)


LAG_ARGUMENTS = {
    "http://a:aaaa…": lambda n: "http://a:" + "a" * n,
    "authorization: … (the slowest after)": lambda n: ("authorization: " * (n // 15 + 1))[:n],
}


def loop_lag(size: int = 100_000) -> dict[str, float]:
    """Seconds of the loop's longest stall while each hostile request is drawn three times."""
    import asyncio
    import importlib

    from bot.masking import masker

    dispatcher = importlib.import_module("bot.slack.delivery.dispatcher")
    drawn = getattr(dispatcher, "_drawn", None)
    out: dict[str, float] = {}
    for label, make in LAG_ARGUMENTS.items():
        masker.clear_cache()
        request = ApprovalRequest(
            event=ApprovalEvent(tool_name="deploy", arguments={"url": make(size)}),
            config=ApprovalConfig(),
            channel="C1",
        )

        async def run(request: ApprovalRequest) -> float:
            worst, done = 0.0, False

            async def tick() -> None:
                nonlocal worst
                while not done:
                    start = time.perf_counter()
                    await asyncio.sleep(0.001)
                    worst = max(worst, time.perf_counter() - start - 0.001)

            ticker = asyncio.create_task(tick())
            await asyncio.sleep(0.05)
            if drawn is not None:
                await drawn(request)  # the post
            else:
                blocks.request_message(request)
            await asyncio.sleep(0.01)
            blocks.request_message(request)  # an App Home view, a reminder
            await asyncio.sleep(0.01)
            blocks.decided_message(request)  # the update
            await asyncio.sleep(0.05)
            done = True
            await ticker
            return worst

        out[label] = asyncio.run(run(request))
    return out


def detector() -> dict[str, Any] | None:
    try:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.core.scan import scan_line
        from detect_secrets.settings import transient_settings
    except ImportError:
        return None
    plugins = [c.__name__ for c in get_mapping_from_secret_type_to_class().values()]
    out: dict[str, Any] = {}
    for label, names in (
        ("regex_plugins", [n for n in plugins if "Entropy" not in n]),
        ("all_plugins", plugins),
    ):
        with transient_settings({"plugins_used": [{"name": n} for n in names]}):
            found, lines = 0, 0
            start = time.perf_counter()
            for fake in FAKES:
                text = normalise(fake.text)[0]
                values: list[str] = []
                for line in text.splitlines() or [text]:
                    values += [s.secret_value or "" for s in scan_line(line)]
                    lines += 1
                found += any(v and (v in fake.secret or fake.secret in v) for v in values)
            elapsed = time.perf_counter() - start
            flagged = sum(
                1 for n in NEAR_MISSES if any(list(scan_line(x)) for x in n.text.splitlines())
            )
        out[label] = {
            "plugins": len(names),
            "fakes_found": found,
            "near_misses_flagged": flagged,
            "us_per_line": elapsed / lines * 1e6,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument(
        "--rules", action="store_true", help="time each rule on its worst case (minutes)"
    )
    parser.add_argument("--limit", type=float, default=60.0, help="seconds per timed case")
    parser.add_argument(
        "--loop-lag", action="store_true", help="the event loop's stall drawing a 100 KB argument"
    )
    args = parser.parse_args()
    figures: dict[str, Any] = {"fakes": len(FAKES), "near_misses": len(NEAR_MISSES)}
    if args.rules:
        print("each rule on its worst hostile text: 80 KB, 1 MiB, 2 MiB")
        figures["rules"] = rules(args.limit)
    if args.loop_lag:
        figures["loop_lag_s"] = loop_lag()
        for label, seconds in figures["loop_lag_s"].items():
            print(f"event loop's longest stall, a 100 KB argument {label}: {seconds * 1000:.1f} ms")
    figures["ours"] = ours(args.repeat)
    missed = sum(1 for f in FAKES if f.value is None and f.secret in mask_text(f.text))
    flagged = sum(1 for n in NEAR_MISSES if mask_text(n.text) != n.text)
    figures["ours"]["fakes_missed"] = missed
    figures["ours"]["near_misses_flagged"] = flagged
    figures["detect_secrets"] = detector()
    o = figures["ours"]
    print(f"corpus: {len(FAKES)} fakes, {len(NEAR_MISSES)} near misses")
    print(f"ours: missed {missed}, near misses flagged {flagged}")
    print(
        f"  mask_text, {o['ordinary_text_chars']}-char ordinary text: "
        f"{o['ordinary_text_us']:.0f} µs (cached: {o['ordinary_text_cached_us']:.1f} µs)"
    )
    print(f"  mask_text, per corpus fake: {o['corpus_fake_us']:.0f} µs")
    print(f"  mask_text, {o['hostile_chars']}-char hostile text: {o['hostile_64k_ms']:.1f} ms")
    print(
        f"  request message as a post sends it (rendered, masked as drawn): "
        f"{o['message_render_us']:.0f} µs afresh, {o['message_render_again_us']:.0f} µs again "
        "(the same request: its texts' masks cached)"
    )
    print(
        f"  the same message scanned whole by outbound (a plain dict): "
        f"{o['message_scan_us']:.0f} µs afresh"
    )
    ds = figures["detect_secrets"]
    if ds is None:
        print("detect-secrets: not installed (pip install detect-secrets to compare)")
    else:
        for label, row in ds.items():
            print(
                f"detect-secrets {label} ({row['plugins']}): found {row['fakes_found']}/"
                f"{len(FAKES)}, near misses flagged {row['near_misses_flagged']}/"
                f"{len(NEAR_MISSES)}, {row['us_per_line']:.0f} µs/line"
            )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
