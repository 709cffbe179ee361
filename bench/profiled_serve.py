"""`approval-bot serve` with a CPU-time profiler, switched on and off by signals (bench use).

    python bench/profiled_serve.py OUT [serve arguments…]

SIGUSR1 starts profiling, SIGUSR2 stops it and writes OUT (the k-th time after the
first: OUT.k, so one run can profile several phases). Two profilers:

- OUT ending in `.pstats`: cProfile timed with `time.process_time` (exact call counts,
  but its overhead inflates code that makes many small calls);
- anything else: a sampler on the process's CPU clock (`setitimer(ITIMER_PROF)`, one
  sample per millisecond of CPU), written as collapsed stacks for `python -m
  bench.stacks OUT`. A wall-clock sampler such as py-spy also counts the time the process
  sat descheduled inside a socket write on a shared machine; this one counts CPU only.

`bench_e2e --bot-process --bot-cprofile OUT` runs the bot this way over the load
phase. It imports nothing from bench/, so another checkout's interpreter can run it
against that checkout's bot (`--bot-exe`).
"""

from __future__ import annotations

import cProfile
import os
import signal
import sys
import time
from collections import Counter
from types import FrameType

INTERVAL = 0.001  # seconds of process CPU time between samples


class Sampler:
    def __init__(self, out: str) -> None:
        self.out = out
        self.stacks: Counter[str] = Counter()
        self.written = 0

    def sample(self, signum: int, frame: FrameType | None) -> None:
        names = []
        while frame is not None:
            code = frame.f_code
            names.append(f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno})")
            frame = frame.f_back
        self.stacks[";".join(reversed(names))] += 1

    def enable(self) -> None:
        self.stacks.clear()
        signal.signal(signal.SIGPROF, self.sample)
        signal.setitimer(signal.ITIMER_PROF, INTERVAL, INTERVAL)

    def disable(self) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        self.written += 1
        out = self.out if self.written == 1 else f"{self.out}.{self.written}"
        with open(out + ".part", "w") as f:
            for stack, n in self.stacks.items():
                f.write(f"{stack} {n}\n")
        os.replace(out + ".part", out)


class Deterministic:
    def __init__(self, out: str) -> None:
        self.out = out
        self.profiler = cProfile.Profile(time.process_time)
        self.written = 0

    def enable(self) -> None:
        self.profiler = cProfile.Profile(time.process_time)
        self.profiler.enable()

    def disable(self) -> None:
        self.profiler.disable()
        self.written += 1
        base = self.out.removesuffix(".pstats")
        self.profiler.dump_stats(self.out if self.written == 1 else f"{base}.{self.written}.pstats")


def main() -> int:
    out = sys.argv[1]
    profiler = Deterministic(out) if out.endswith(".pstats") else Sampler(out)
    signal.signal(signal.SIGUSR1, lambda signum, frame: profiler.enable())
    signal.signal(signal.SIGUSR2, lambda signum, frame: profiler.disable())
    from bot.cli.main import main as cli_main

    return cli_main(["serve", *sys.argv[2:]])


if __name__ == "__main__":
    sys.exit(main())
