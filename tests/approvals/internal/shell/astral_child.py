"""A child process for test_shell_parse: analyse 20,000 random commands mixing shell syntax
with characters past U+FFFF (argv[1]: the seed); prints "ok" unless the process dies."""

from __future__ import annotations

import random
import sys

from approvals._internal.shell.normalise import analyse

CHARS = [*"{} a;|$()'\"\\<>&#", "\n"]


def main(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(20_000):
        size = rng.randint(1, 12)
        tail = "".join(
            rng.choice([*CHARS, chr(rng.randint(0x10000, 0x3FFFF))]) for _ in range(size)
        )
        analyse("npm test " + tail)
    print("ok")


if __name__ == "__main__":
    main(int(sys.argv[1]))
