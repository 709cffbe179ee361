"""approvals: the domain and agent-facing library of approval-bot (no Slack, no bot)."""
