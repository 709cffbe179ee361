"""Coding agents on this machine: the command hook, writing and checking their hook settings."""
