"""`python -m tests.support.fresh_machine ARGS…`: `approval-bot ARGS…` as on a fresh machine,
where nothing answers on localhost:6379 (this one may have a Redis there), so `serve` uses
its embedded server. For tests that need a real `serve` process (kill -9, signals)."""

from __future__ import annotations

import sys

from bot.ops import embedded_redis

_answers = embedded_redis.answers


def _nothing_on_localhost(url: str, timeout: float = 1.0) -> bool:
    return not url.endswith("localhost:6379/0") and _answers(url, timeout)


embedded_redis.answers = _nothing_on_localhost

if __name__ == "__main__":
    from bot.cli.main import main

    sys.exit(main())
