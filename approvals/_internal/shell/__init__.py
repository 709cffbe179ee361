"""The shell-command model: a command line parsed into normalised simple commands."""
