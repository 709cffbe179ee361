"""Integrations with agent tools and frameworks; each framework is an optional extra, imported
only when used.

- `coding_agents`: Claude Code / Codex hook JSON in, hook JSON out (`answer_hook`).
- `bot_review`: `SlackReviewPlugin`, the review hook backed by the bot (through `ApprovalClient`).
- `openai_agents`: `resolve_interruptions` (extra `openai-agents`).
- `langgraph`: `approval_resume` (extra `langgraph`).

Importing this package imports neither framework.
"""
