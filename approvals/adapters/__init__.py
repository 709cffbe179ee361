"""Adapters for agent frameworks; each is an optional extra, imported only when used.

    from approvals.adapters.openai_agents import resolve_interruptions   # openai-agents
    from approvals.adapters.langgraph import approval_resume             # langgraph

Importing this package imports neither framework.
"""
