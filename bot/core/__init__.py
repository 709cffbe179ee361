"""The process's skeleton: composing and running the bot, its settings, logging and shutdown."""
