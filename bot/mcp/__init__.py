"""MCP: the approvals MCP server (`approval-bot mcp`, `/mcp`) and the gating proxy (`mcp-proxy`).

    bot/mcp/reviewer_wait.py   wait for a decision with progress notifications; withdraw on cancel
    bot/mcp/server.py    the approvals server: permission_prompt, request_approval, ask_human
    bot/mcp/http.py      Streamable HTTP at /mcp inside `serve`, behind the API's bearer tokens
    bot/mcp/proxy.py     serve an upstream MCP server's tools, gating every tools/call
    bot/mcp/upstream.py  the gated server: a child process (stdio) or a Streamable HTTP URL
    bot/mcp/stdio.py     stdin with lone surrogates (Node's JSON) repaired before the SDK parses it

All protocol work is the official `mcp` SDK's; these modules only decide.
"""
