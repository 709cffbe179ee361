"""What `mcp-proxy` gives a child upstream (`bot/mcp/upstream.py`): a scrubbed environment,
and a parent it cannot read (non-dumpable)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bot.mcp.upstream import upstream_environment

PROXY_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/home/dev",
    "LANG": "en_GB.UTF-8",
    "LC_TIME": "de_DE.UTF-8",
    "TZ": "Europe/Berlin",
    "APPROVALS_URL": "https://approvals.example.com",
    "APPROVALS_TOKEN": "tok-4f1b9c2e7d3a8b6c",
    "REDIS_URL": "redis://:s3cret@10.0.0.5:6379/0",
    "SLACK_BOT_TOKEN": "xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_Zt7Qw2Er9Ty4Ui1Op6As3Df8Gh5Jk0Lz2Xc4",
}


def test_the_upstream_gets_the_locale_and_what_is_passed_only() -> None:
    env = upstream_environment(PROXY_ENV, ("GITHUB_PERSONAL_ACCESS_TOKEN", "NOT_SET_ANYWHERE"))
    assert env == {
        "LANG": "en_GB.UTF-8",
        "LC_TIME": "de_DE.UTF-8",
        "TZ": "Europe/Berlin",
        "GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_Zt7Qw2Er9Ty4Ui1Op6As3Df8Gh5Jk0Lz2Xc4",
    }  # PATH, HOME and the like come from the MCP SDK's own defaults


@pytest.mark.parametrize("name", ["APPROVALS_TOKEN", "REDIS_URL", "SLACK_BOT_TOKEN", "redis_url"])
def test_the_approval_settings_are_never_passed(name: str) -> None:
    with pytest.raises(ValueError, match="never passed"):
        upstream_environment(PROXY_ENV, (name,))


def test_shield_process_makes_the_proxy_non_dumpable() -> None:
    """PR_GET_DUMPABLE is 0 after `shield_process`: /proc/<pid>/environ and ptrace are then
    closed to the processes of the same user (root aside). Linux only (`prctl`)."""
    assert sys.platform.startswith("linux"), "approval-bot's mcp-proxy shields on Linux"
    script = (
        "import ctypes\n"
        "from bot.mcp.upstream import shield_process\n"
        "libc = ctypes.CDLL(None)\n"
        "before = libc.prctl(3, 0, 0, 0, 0)\n"
        "print(before, shield_process(), libc.prctl(3, 0, 0, 0, 0))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert out == ["1", "True", "0"]
