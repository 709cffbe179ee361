"""Every secret rule runs in linear time: each on its worst hostile text at 2 MiB.

One argument of 100 KB (`http://a:aaaa…`) froze the bot for 24 s: `url_credentials` was
quadratic. The hostile texts are `tests/support/secret_corpus.py` `HOSTILE_TEXTS`. A child
process times nothing that is asserted: it runs the cases one after the other and says
when each is done, and a case not done within `GUARD_S` fails the test, naming it. The
guard is generous: `bench/bench_masking.py --rules` prints every rule's worst case at
2 MiB under 2 s on this machine, where a quadratic one needs hours.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.masking.rules import RULES
from tests.support.secret_corpus import HOSTILE_TEXTS

ROOT = Path(__file__).resolve().parents[3]
#: Seconds each case may take before the test fails (see the module's docstring).
GUARD_S = 30.0

#: The child: reads cases (rule index or null for every rule, hostile text, size) as one
#: JSON line; with "pick", first chooses each rule's worst text (slowest at `pick` chars),
#: then runs each case and prints its number when done.
CHILD = r"""
import json, sys, time
from bot.masking.rules import RULES, find
from tests.support.secret_corpus import HOSTILE_TEXTS
job = json.loads(sys.stdin.readline())
cases = job["cases"]
if job.get("pick"):
    small = {name: make(job["pick"]) for name, make in HOSTILE_TEXTS.items()}
    for index, rule in enumerate(RULES):
        slowest, worst = -1.0, ""
        for name, text in small.items():
            start = time.perf_counter()
            find(text, (rule,))
            took = time.perf_counter() - start
            if took > slowest:
                slowest, worst = took, name
        cases.append([index, worst, job["size"]])
    print(json.dumps(cases), flush=True)
for n, (index, name, size) in enumerate(cases):
    text = HOSTILE_TEXTS[name](size)
    find(text, RULES if index is None else (RULES[index],))
    print(n, flush=True)
"""


def run_cases(job: dict[str, object], count: int | None = None) -> list[list[object]]:
    """Run `job` in the child; fail naming the first case not done within `GUARD_S`."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(json.dumps(job) + "\n")
    child.stdin.close()
    selector = selectors.DefaultSelector()
    selector.register(child.stdout, selectors.EVENT_READ)

    def line(what: str) -> str:
        deadline = time.monotonic() + GUARD_S
        while time.monotonic() < deadline:
            if selector.select(deadline - time.monotonic()):
                got = child.stdout.readline()  # type: ignore[union-attr]
                assert got, f"the child stopped before {what} (exit {child.wait()})"
                return got
        child.kill()
        child.wait()
        pytest.fail(f"not done within {GUARD_S:.0f} s: {what}")

    try:
        cases: list[list[object]] = list(job["cases"])  # type: ignore[call-overload]
        if job.get("pick"):
            cases = json.loads(line("choosing each rule's worst hostile text"))
        for n, (index, name, size) in enumerate(cases):
            rule = "every rule" if index is None else f"{RULES[index].name}-{index}"  # type: ignore[index]
            assert line(f"{rule} on {name!r} at {size} characters").strip() == str(n)
        assert child.wait(GUARD_S) == 0
        return cases
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        selector.close()
        child.stdout.close()


@pytest.mark.timeout(900)
def test_each_rule_on_its_worst_hostile_text_at_2_mib() -> None:
    cases = run_cases({"cases": [], "pick": 32 * 1024, "size": 2 << 20})
    assert sorted(c[0] for c in cases) == list(range(len(RULES)))  # type: ignore[type-var]


@pytest.mark.timeout(900)
def test_every_rule_on_every_hostile_text() -> None:
    """All the rules together (as `find` runs them) on each hostile text at 256 KiB."""
    run_cases({"cases": [[None, name, 256 * 1024] for name in HOSTILE_TEXTS]})


@pytest.mark.parametrize(
    ("hostile", "secret"),
    [
        ("http://a:" + "a" * 50 + "@host/ http://u:{s}@db.internal/x", "Zq9-hunter2-Zq9"),
        ("a=a=a=a=a=a=a=a=a=a password={s}", "Zq9-hunter2-Zq9"),
        ("mysql mysql mysql mysql -u root -p{s} db", "Zq9hunter2Zq9"),
        ("curl curl curl -u deploy:{s} https://ci", "Zq9hunter2Zq9"),
    ],
)
def test_the_linear_rules_still_find_after_their_near_starts(hostile: str, secret: str) -> None:
    """A rule split into where a secret may begin and the rest (`Rule.tail`) still finds a
    secret after beginnings that came to nothing."""
    from bot.masking.masker import mask_text

    text = hostile.format(s=secret)
    assert secret not in mask_text(text)
