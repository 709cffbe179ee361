"""`approval-bot`: the command line, one module per command group (registered in `bot.cli.main`)."""
