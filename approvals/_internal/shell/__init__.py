"""The shell-command model: a command line parsed into normalised simple commands, judged
read-only or not, with its risks, for the policy's `command` and `risks` rules.

Internal (not a stable API). The modules, in the order a command goes through them:

    parse.py      tree-sitter-bash → raw simple commands (bounded: size, CPU, nodes, depth)
    word_nodes.py word nodes → values (words.py: quotes, escapes, ANSI-C, brace expansion)
    normalise.py  wrappers unwrapped (wrappers.py), sh -c strings parsed again; `analyse`
    options.py    options split and spelled canonically (tables.py), the subcommand
    readonly.py   the read-only list and the judgement
    risks.py      risk hints
    matching.py   `match.command` / `match.risks` and `policy check`'s warnings
    view.py       an event's command, the cache, `risks_of`, `explain`, `plain_commands`
    model.py      the dataclasses they share

What a policy author sees: docs/operating/shell-commands.md.
"""

from approvals._internal.shell.model import ParsedCommand, Risk, RiskCode, SimpleCommand
from approvals._internal.shell.normalise import analyse
from approvals._internal.shell.view import (
    analysis_of,
    command_of,
    explain,
    is_plain,
    plain_command,
    plain_commands,
    risks_of,
)

__all__ = [
    "ParsedCommand",
    "Risk",
    "RiskCode",
    "SimpleCommand",
    "analyse",
    "analysis_of",
    "command_of",
    "explain",
    "is_plain",
    "plain_command",
    "plain_commands",
    "risks_of",
]
