"""Summarise a py-spy collapsed-stack file (`py-spy record --format raw`, or
`bench_e2e --bot-profile FILE`): the functions with the most samples, inclusive
(anywhere on the stack) and self (the innermost frame).

    .venv/bin/python -m bench.stacks FILE [--top 40] [--match bot/]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

_LINE = re.compile(r"^(.*) (\d+)$")
_FRAME_LINE = re.compile(r":\d+\)$")


def _frame(raw: str) -> str:
    """'func (path/to/file.py:123)' → 'func (path/to/file.py)': one entry per function."""
    raw = _FRAME_LINE.sub(")", raw)
    for marker in ("site-packages/", "/lib/python3"):
        if marker in raw:
            head, _, tail = raw.partition("(")
            raw = head + "(" + tail.split(marker, 1)[-1]
    return raw


#: Innermost frames that are mostly time spent descheduled, not on the CPU: on a shared
#: machine py-spy (a wall-clock sampler) finds the process there when the socket write
#: it made woke the receiver, which took the core. `/proc/<pid>/stat` counts the real
#: system time; these are left out unless --all.
WAITING = ("_SelectorSocketTransport.write (", "EpollSelector.select (")


def summarise(path: str, *, everything: bool = False) -> tuple[int, Counter[str], Counter[str]]:
    total = 0
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    with open(path) as f:
        for line in f:
            m = _LINE.match(line.rstrip("\n"))
            if not m:
                continue
            frames = [_frame(x) for x in m.group(1).split(";")]
            if not everything and frames[-1].startswith(WAITING):
                continue
            n = int(m.group(2))
            total += n
            for fr in set(frames):
                inclusive[fr] += n
            own[frames[-1]] += n
    return total, inclusive, own


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("file")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--match", default="", help="only functions whose text contains this")
    p.add_argument("--all", action="store_true", help="keep samples in socket writes and select")
    args = p.parse_args()
    total, inclusive, own = summarise(args.file, everything=args.all)
    print(f"{total} samples")
    for title, counts in (("inclusive", inclusive), ("self", own)):
        print(f"\n{title}: % of samples  function (file)")
        shown = [(k, v) for k, v in counts.most_common() if args.match in k][: args.top]
        for k, v in shown:
            print(f"  {100 * v / max(1, total):5.1f}%  {k}")


if __name__ == "__main__":
    main()
