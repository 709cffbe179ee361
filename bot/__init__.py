"""The Slack service: Block Kit rendering, listeners, dispatcher, sweeper, HTTP API and CLI."""
