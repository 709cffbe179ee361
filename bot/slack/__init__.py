"""Slack: interactions in (listeners, App Home), shared ids and the Web API client; rendering and
delivery in subpackages."""
