"""`python -m tests.support.fresh_machine ARGS…`: `approval-bot ARGS…` with the well-known
Redis address (`bot.ops.redis_location.LOCALHOST`, localhost:6379, used only when REDIS_URL
names it) pointed away from this machine's real one: at `STAND_IN_VARIABLE`'s URL when set
(a test's own stand-in server, to see that nothing is written there), else at a port where
nothing listens. For tests that need a real `serve` (or CLI, or hook) process."""

from __future__ import annotations

import os
import sys

from bot.ops import redis_location

#: The environment variable naming the stand-in for localhost:6379 (a redis:// URL).
STAND_IN_VARIABLE = "APPROVALS_TEST_LOCALHOST_REDIS"
#: Nothing listens on port 1 of loopback: a connect is refused at once.
NOWHERE = "redis://127.0.0.1:1/0"

redis_location.LOCALHOST = os.environ.get(STAND_IN_VARIABLE) or NOWHERE

if __name__ == "__main__":
    from bot.cli.main import main

    sys.exit(main())
