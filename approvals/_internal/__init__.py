"""Internal: the approvals core that the bot and the Redis transport run (service, policy,
store, the shell-command model); not a stable API. Agents import from `approvals`."""
