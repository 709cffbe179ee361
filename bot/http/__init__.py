"""The HTTP side: the agent API, its schemas and principals, parked long-polls, the agents' http
hooks."""
