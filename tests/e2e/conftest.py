"""End-to-end fixtures (defined in harness.py so tests can import its helpers too)."""

from tests.e2e.harness import http, make_bot, reviewer, slack  # noqa: F401
