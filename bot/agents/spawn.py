"""When this process was spawned: the clock a command hook's timeout runs on.

An agent times its command hook from the moment it spawns the process, so
interpreter start-up and imports count against the hook's budget. Kept free of
imports beyond the standard library, so reading it costs nothing.
"""

from __future__ import annotations

import os
import time


def process_age() -> float:
    """Seconds since this process was spawned (Linux /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def process_started() -> float:
    """When this process was spawned, on the monotonic clock. A command hook run as its own
    process (what the agent spawns) counts its timeout from here; `bot.cli.main` called
    inside a longer-lived process counts from the call instead."""
    return time.monotonic() - process_age()
