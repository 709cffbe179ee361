"""What counts as read-only: the shipped list of programs that only read and print, the
options that make one write or run something, and the judgement for one simple command.

In the spirit of the safe-command lists coding agents use (Codex's `is_safe_command`):
a command is read-only when its program is on the list, no option on the program's
writing list is given, it writes no file through a redirection, it runs through no
wrapper that changes who runs it, and it is not a function defined in the same line.
`why_not(command)` says why a command is not read-only (None when it is).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from approvals._internal.shell.model import SimpleCommand, Word
from approvals._internal.shell.normalise import code_variable
from approvals._internal.shell.tables import CODE_VARIABLES, WRAPPERS, harmless_variable

#: System directories a program given by path may come from and still be trusted.
SYSTEM_BIN_DIRS = ("/bin/", "/usr/bin/", "/usr/local/bin/", "/sbin/", "/usr/sbin/",
                   "/opt/homebrew/bin/")  # fmt: skip

Check = Callable[[SimpleCommand], str | None]


@dataclass(frozen=True)
class ReadOnly:
    """A program on the read-only list: why, and what would make a call of it write."""

    why: str
    #: Options (canonical spellings; combined short flags are split first) that write or run.
    writes: frozenset[str] = frozenset()
    #: At most this many positionals (`uniq IN OUT` writes OUT).
    max_positionals: int | None = None
    #: Extra judgement for a call (git's subcommands, sed's script).
    check: Check | None = None


def _r(why: str, writes: str = "", **kw: object) -> ReadOnly:
    return ReadOnly(why=why, writes=frozenset(writes.split()), **kw)  # type: ignore[arg-type]


# -- checks for programs with subcommands ---------------------------------------------------

_GIT_READ = frozenset(
    {"status", "log", "diff", "show", "blame", "rev-parse", "ls-files", "ls-tree", "cat-file",
     "rev-list", "describe", "shortlog", "whatchanged", "name-rev", "merge-base", "show-ref",
     "for-each-ref", "count-objects", "grep", "version", "help", "var", "check-ignore",
     "check-attr", "cherry", "range-diff", "diff-tree", "diff-files", "diff-index",
     "verify-commit", "verify-tag", "ls-remote", "annotate"}
)  # fmt: skip
#: git's own options that run programs (-c core.pager=…, aliases) or a pager.
_GIT_GLOBAL_RUNS = frozenset({"-c", "--config-env", "--exec-path", "-p"})
#: Subcommand options that write a file or run a program.
_GIT_RUNS = frozenset({"--output", "--ext-diff", "--textconv", "--exec", "-O",
                       "--open-files-in-pager", "--upload-pack"})  # fmt: skip
_BRANCH_LISTING = frozenset(
    {"--list", "--all", "--remotes", "--verbose", "-vv", "--show-current", "--format",
     "--contains", "--no-contains", "--merged", "--no-merged", "--sort", "--points-at",
     "--column", "--no-column", "--ignore-case"}
)  # fmt: skip
_TAG_LISTING = frozenset({"--list", "-n", "--contains", "--no-contains", "--points-at", "--sort",
                          "--format", "--merged", "--no-merged", "--column"})  # fmt: skip
_CONFIG_READ = frozenset({"--get", "--get-all", "--get-regexp", "--get-urlmatch", "--list"})
_CONFIG_WRITE = frozenset({"--unset", "--unset-all", "--add", "--replace-all", "--rename-section",
                           "--remove-section", "--edit"})  # fmt: skip


def _git(c: SimpleCommand) -> str | None:
    sub = c.subcommand
    own = c.args[: c.args.index(sub)] if sub is not None and sub in c.args else c.args
    runs = (set(own) & _GIT_GLOBAL_RUNS) | (c.flags & _GIT_RUNS)
    if runs:
        return f"git {sorted(runs)[0]} writes a file or runs a program"
    rest = c.positionals[1:]
    listing_flags = {f for f in c.flags if f.startswith("-")} - {
        "-C",
        "-P",
        "--git-dir",
        "--work-tree",
        "--no-optional-locks",
    }
    if sub is None:
        return None if c.flags & {"-v", "-h"} else "git without a subcommand"
    if sub in _GIT_READ:
        return None
    if sub == "branch":
        if not rest and listing_flags <= _BRANCH_LISTING:
            return None
        if c.flags & {"--list"} and listing_flags <= _BRANCH_LISTING:
            return None
        return "git branch creates, moves or deletes branches"
    if sub == "tag":
        if listing_flags <= _TAG_LISTING and (not rest or "--list" in c.flags):
            return None
        return "git tag creates or deletes tags"
    if sub == "remote":
        if not rest or rest[0] in ("show", "get-url", "-v", "--verbose"):
            return None
        return "git remote changes remotes"
    if sub == "config":
        if c.flags & _CONFIG_WRITE:
            return "git config changes the configuration"
        if c.flags & _CONFIG_READ or (rest and rest[0] in ("get", "list")) or len(rest) == 1:
            return None
        return "git config changes the configuration"
    if sub == "reflog":
        writes = rest[:1] in (("expire",), ("delete",))
        return "git reflog expire/delete changes the repository" if writes else None
    if sub in ("stash", "worktree", "submodule", "notes"):
        action = rest[0] if rest else ("list" if sub == "worktree" else None)
        readers = {"stash": ("list", "show"), "worktree": ("list",),
                   "submodule": (None, "status"), "notes": ("list", "show")}[sub]  # fmt: skip
        return None if action in readers else f"git {sub} {action or ''} changes the repository"
    return f"git {sub} is not on the read-only list"


def _subcommands(program: str, allowed: frozenset[str]) -> Check:
    def check(c: SimpleCommand) -> str | None:
        if c.subcommand in allowed or (
            c.subcommand is None and c.flags & {"--version", "-v", "-V", "--help"}
        ):
            return None
        return f"{program} {c.subcommand or ''} is not on the read-only list".replace("  ", " ")

    return check


def _version_only(c: SimpleCommand) -> str | None:
    if (
        not c.positionals
        and c.flags
        and c.flags <= {"--version", "-V", "-v", "--help", "-h", "-version"}
    ):
        return None
    return f"{c.program} runs code (only --version / --help is read-only)"


def _sed(c: SimpleCommand) -> str | None:
    if c.flags - {"-n", "-E", "-r", "--quiet", "--silent", "--regexp-extended"}:
        return "sed with options other than -n / -E"
    if "-n" not in c.flags and "--quiet" not in c.flags and "--silent" not in c.flags:
        return "sed without -n (only `sed -n 'N,Mp'` is read-only)"
    script = c.positionals[0] if c.positionals else ""
    if re.fullmatch(r"\s*(\d+|\$)(,(\d+|\$))?\s*p\s*", script):
        return None
    return "sed script other than N,Mp"


def _date(c: SimpleCommand) -> str | None:
    if any(not p.startswith("+") for p in c.positionals):
        return "date with an argument sets the clock"
    return None


def _tar(c: SimpleCommand) -> str | None:
    if c.flags & {"-t", "--list"} and not c.flags & {
        "-x",
        "-c",
        "-r",
        "-u",
        "-A",
        "--delete",
        "--to-command",
        "--extract",
        "--create",
    }:
        return None
    return "tar other than -t (list)"


def _kubectl(c: SimpleCommand) -> str | None:
    reads = {"get", "describe", "logs", "version", "explain", "api-resources", "api-versions",
             "cluster-info", "top", "events"}  # fmt: skip
    if c.subcommand == "get" and any(p.startswith("secret") for p in c.positionals[1:]):
        return "kubectl get secrets prints credentials"
    if c.subcommand in reads:
        return None
    if (
        c.subcommand == "config"
        and c.positionals[1:2]
        and c.positionals[1] in ("view", "get-contexts", "current-context", "get-clusters")
    ):
        return None
    if c.subcommand == "auth" and c.positionals[1:2] == ("can-i",):
        return None
    return f"kubectl {c.subcommand or ''} is not on the read-only list"


READ_ONLY: dict[str, ReadOnly] = {
    # listing and reading files
    "ls": _r("lists directories"), "dir": _r("lists directories"),
    "cat": _r("prints files"), "head": _r("prints the start of files"),
    "tail": _r("prints the end of files"), "wc": _r("counts lines, words, bytes"),
    "less": _r("pages files (a reviewer-free agent has no terminal to run ! in)"),
    "grep": _r("searches text"), "egrep": _r("searches text"), "fgrep": _r("searches text"),
    "rg": _r("ripgrep searches text; --pre runs a program, -z runs decompressors",
             "--pre --hostname-bin -z --search-zip"),
    "ag": _r("searches text"), "ack": _r("searches text"),
    "find": _r("lists files; -exec/-ok run commands, -delete deletes, -fprint* write",
               "-exec -execdir -ok -okdir -delete -fprint -fprint0 -fprintf -fls"),
    "fd": _r("lists files; -x/-X run commands", "-x --exec -X --exec-batch"),
    "fdfind": _r("lists files; -x/-X run commands", "-x --exec -X --exec-batch"),
    "tree": _r("lists a directory tree; -o writes a file", "-o"),
    "stat": _r("prints file status"), "file": _r("guesses file types"),
    "du": _r("prints disk usage"), "df": _r("prints free space"),
    "realpath": _r("prints a path"), "readlink": _r("prints a link's target"),
    "basename": _r("prints part of a path"), "dirname": _r("prints part of a path"),
    "diff": _r("compares files"), "cmp": _r("compares files"), "comm": _r("compares files"),
    "md5sum": _r("checksums"), "sha1sum": _r("checksums"), "sha256sum": _r("checksums"),
    "sha512sum": _r("checksums"), "shasum": _r("checksums"), "b2sum": _r("checksums"),
    "cksum": _r("checksums"), "strings": _r("prints text in files"),
    "od": _r("dumps bytes"), "hexdump": _r("dumps bytes"),
    "nl": _r("numbers lines"), "tac": _r("prints files reversed"), "rev": _r("reverses lines"),
    "bat": _r("prints files"), "zcat": _r("prints compressed files"),
    "tee": _r("copies its input to its output; file arguments are written", check=lambda c: (
        None if all(p == "/dev/null" for p in c.positionals) else "tee writes files")),
    "jq": _r("filters JSON (no in-place option)"),
    "yq": _r("filters YAML; -i edits in place", "-i --inplace"),
    "tar": _r("tar -t lists an archive", check=_tar),
    # text filters
    "sort": _r("sorts lines; -o writes a file, --compress-program runs one",
               "-o --output --compress-program"),
    "uniq": _r("filters lines; a second file argument is written", max_positionals=1),
    "cut": _r("cuts columns"), "tr": _r("translates characters"), "paste": _r("joins lines"),
    "column": _r("formats columns"), "fold": _r("wraps lines"), "fmt": _r("formats text"),
    "expand": _r("tabs to spaces"), "unexpand": _r("spaces to tabs"), "join": _r("joins files"),
    "numfmt": _r("formats numbers"), "seq": _r("prints numbers"), "expr": _r("evaluates"),
    "sed": _r("only `sed -n 'N,Mp'` (sed's w and e commands write and run)", check=_sed),
    "base64": _r("encodes; -o writes a file", "-o --output"),
    # printing and the environment
    "echo": _r("prints its arguments"), "printf": _r("prints its arguments"),
    "pwd": _r("prints the directory"), "env": _r("prints the environment (no command)"),
    "printenv": _r("prints the environment"), "which": _r("finds programs"),
    "whereis": _r("finds programs"), "type": _r("describes commands"),
    "command": _r("command -v / -V describes commands"),
    "date": _r("prints the date; an argument sets the clock", "-s --set", check=_date),
    "cal": _r("prints a calendar"), "id": _r("prints ids"), "whoami": _r("prints the user"),
    "groups": _r("prints groups"), "uname": _r("prints the system"),
    "hostname": _r("prints the host name (an argument sets it)", "-F --file -b --boot",
                   max_positionals=0),
    "uptime": _r("prints uptime"), "nproc": _r("counts CPUs"), "free": _r("prints memory"),
    "ps": _r("lists processes"), "pgrep": _r("finds processes"), "lscpu": _r("describes CPUs"),
    "arch": _r("prints the architecture"), "tty": _r("prints the terminal"),
    "locale": _r("prints the locale"), "getconf": _r("prints configuration values"),
    "true": _r("does nothing"), "false": _r("does nothing"), ":": _r("does nothing"),
    "test": _r("tests files and strings"), "[": _r("tests files and strings"),
    "[[": _r("tests files and strings"), "sleep": _r("waits"), "wait": _r("waits for jobs"),
    "cd": _r("changes this shell's directory"), "pushd": _r("changes this shell's directory"),
    "popd": _r("changes this shell's directory"), "dirs": _r("lists the directory stack"),
    "export": _r("sets variables of this shell (PATH and the like are refused earlier)"),
    "declare": _r("sets or prints variables of this shell"),
    "typeset": _r("sets or prints variables of this shell"),
    "local": _r("sets variables of this shell"), "readonly": _r("sets variables of this shell"),
    "unset": _r("unsets variables of this shell"), "set": _r("sets shell options"),
    "shift": _r("shifts arguments"), "read": _r("reads a line into a variable"),
    "trap": _r("sets a handler (its commands are checked on their own)"),
    "history": _r("prints the history"), "jobs": _r("lists jobs"), "help": _r("prints help"),
    # tools with subcommands
    "git": _r("git status|log|diff|show|blame|branch (listing)|…", check=_git),
    "npm": _r("npm ls|view|outdated|… print", check=_subcommands("npm", frozenset(
        {"ls", "view", "outdated", "why", "root", "prefix", "bin", "help", "search",
         "explain", "fund", "doctor"}))),
    "pip": _r("pip list|show|freeze|check print", check=_subcommands("pip", frozenset(
        {"list", "show", "freeze", "check", "help", "debug", "inspect"}))),
    "pip3": _r("pip list|show|freeze|check print", check=_subcommands("pip3", frozenset(
        {"list", "show", "freeze", "check", "help", "debug", "inspect"}))),
    "docker": _r("docker ps|images|inspect|logs|… print", check=_subcommands("docker", frozenset(
        {"ps", "images", "inspect", "logs", "version", "info", "stats", "top", "port",
         "history"}))),
    "kubectl": _r("kubectl get|describe|logs|… (not secrets)", check=_kubectl),
    "go": _r("go version|env|list|doc print; env -w/-u writes", "-w -u", check=_subcommands(
        "go", frozenset({"version", "env", "list", "doc", "help"}))),
    "cargo": _r("cargo --version|tree|metadata print", check=_subcommands("cargo", frozenset(
        {"tree", "metadata", "help", "version"}))),
    "terraform": _r("terraform version|show|validate|providers print", check=_subcommands(
        "terraform", frozenset({"version", "show", "validate", "providers", "graph"}))),
    "helm": _r("helm list|status|history|show print", check=_subcommands("helm", frozenset(
        {"list", "ls", "status", "history", "show", "version", "search", "template"}))),
    "gh": _r("gh pr|issue|run list/view (a second word decides)", check=lambda c: (
        None if (c.subcommand in ("pr", "issue", "run", "repo", "release", "workflow")
        and c.positionals[1:2] and c.positionals[1] in ("list", "view", "status", "diff",
                                                         "checks"))
        or (c.subcommand == "auth" and c.positionals[1:2] == ("status",))
        else f"gh {c.subcommand or ''} is not on the read-only list")),
    # interpreters and compilers: version only
    **{name: _r("runs code; only --version/--help is read-only", check=_version_only)
       for name in ("python", "python3", "node", "ruby", "perl", "java", "javac", "rustc",
                    "gcc", "g++", "clang", "make", "cmake", "deno", "bun", "uv", "poetry",
                    "yarn", "pnpm", "tsc", "php", "dotnet", "swift", "kotlin", "mvn",
                    "gradle", "ruff", "mypy", "black", "pytest", "eslint", "prettier")},
}  # fmt: skip


def why_not(c: SimpleCommand) -> str | None:
    """Why `c` is not read-only; None when it is."""
    if c.problem is not None:
        return c.problem
    program = c.program
    if program is None:
        return "the program is unknown"
    if c.calls_function:
        return f"{program} is a function defined in this command"
    if c.path is not None and not (c.path.startswith(SYSTEM_BIN_DIRS) and "/." not in c.path):
        return f"{c.path} is not a system program"
    entry = READ_ONLY.get(program)
    if entry is None:
        return f"{program} is not on the read-only list"
    for wrapper in c.wrappers:
        spec = WRAPPERS.get(wrapper.split()[0])
        if spec is not None and not spec.read_only:
            return f"runs through {wrapper.split()[0]}"
    for assignment in c.assignments:
        name, _, value = assignment.partition("=")
        pager = name in CODE_VARIABLES and code_variable(name, Word(value)) is None
        if not harmless_variable(name) and not pager:
            return f"runs with {name} set"
    for redirect in c.redirects:
        if redirect.writes_file:
            target = redirect.target.text if redirect.target else ""
            return f"writes {target} ({redirect.op})"
    writes = c.flags & entry.writes
    if writes:
        return f"{program} {sorted(writes)[0]} writes or runs something"
    if entry.max_positionals is not None and len(c.positionals) > entry.max_positionals:
        return f"{program} with more than {entry.max_positionals} file argument(s) writes"
    if entry.check is not None:
        return entry.check(c)
    return None
