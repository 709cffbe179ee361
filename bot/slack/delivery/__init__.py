"""Slack work out: the outbox dispatcher, paced calls, copies, digests, reminders."""
