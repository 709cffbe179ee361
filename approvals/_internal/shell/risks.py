"""Risk hints: what a parsed command may do that a reviewer should see, one line each.

Each risk has a code (policy rules match on `risks: [code, …]`) and a text naming what
it touches (`recursive_delete: rm -r of build, dist`). Paths are judged against the
event's `cwd`, followed through `cd` at the top level. Hints, not proofs: a path only
known at run time (`$DIR/x`) is judged on its known part only.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Iterator

from approvals._internal.shell.model import (
    HARMLESS_DEVICES,
    ParsedCommand,
    Risk,
    RiskCode,
    SimpleCommand,
    Word,
)
from approvals._internal.shell.tables import INTERPRETERS, SHELLS, WRAPPERS

_PROTECTED = re.compile(r"(?:refs/heads/)?(main|master|release[\w./-]*|production|prod)")
_SENSITIVE_DIRS = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/boot",
                   "/sys", "/proc", "/dev", "/root", "/var", "/System", "/Library",
                   "/private/etc")  # fmt: skip
#: Files and directories whose change runs code later or grants access (any directory).
_SENSITIVE_NAMES = re.compile(
    r"(^|/)(\.ssh|\.aws|\.gnupg|\.kube|\.docker|\.azure|\.config/gcloud|\.config/gh|"
    r"\.config/git|\.config/fish|\.config/autostart|Library/LaunchAgents|\.claude|\.codex|"
    r"\.git/hooks|\.husky)(/|$)|"
    r"(^|/)(\.bashrc|\.bash_profile|\.bash_login|\.bash_logout|\.profile|\.zshrc|\.zprofile|"
    r"\.zshenv|\.zlogin|\.kshrc|\.cshrc|\.tcshrc|\.inputrc|\.netrc|\.npmrc|\.pypirc|"
    r"\.gitconfig|\.git-credentials|\.envrc|\.pgpass|authorized_keys|crontab|sudoers|"
    r"\.git/config)$"
)
_CREDENTIALS = re.compile(
    r"(^|/)\.aws/(credentials|config)$|(^|/)\.ssh/id_[\w-]+$|(^|/)id_(rsa|dsa|ecdsa|ed25519)$|"
    r"\.(pem|key|p12|pfx|jks|keystore)$|(^|/)\.env(\.(?!example$|sample$|template$|dist$)"
    r"[\w.-]+)?$|(^|/)\.(netrc|npmrc|pypirc|git-credentials|pgpass|vault-token)$|"
    r"(^|/)\.docker/config\.json$|(^|/)\.kube/config$|^/etc/g?shadow$|"
    r"(^|/)credentials(\.json|\.db)?$|(^|/)\.config/gh/hosts\.yml$|(^|/)\.config/gcloud/|"
    r"(^|/)\.azure/|(^|/)secrets?\.(ya?ml|json|env|toml)$|(^|/)\.gnupg/|"
    r"service[-_]?account[\w.-]*\.json$|^/proc/[\w]+/environ$"
)
_TOKEN_COMMANDS: dict[tuple[str, str | None], str] = {
    ("printenv", None): "prints the environment (it may hold secrets)",
    ("env", None): "prints the environment (it may hold secrets)",
    ("gh", "auth"): "gh auth token prints a GitHub token",
    ("aws", "configure"): "aws configure reads stored credentials",
    ("gcloud", "auth"): "gcloud auth may print access tokens",
    ("security", "find-generic-password"): "reads the macOS keychain",
    ("security", "find-internet-password"): "reads the macOS keychain",
    ("vault", "read"): "reads a Vault secret",
    ("vault", "kv"): "reads a Vault secret",
}
_PUBLISH: dict[str, frozenset[str]] = {
    "npm": frozenset({"publish"}), "yarn": frozenset({"publish", "npm"}),
    "pnpm": frozenset({"publish"}), "bun": frozenset({"publish"}),
    "twine": frozenset({"upload"}), "cargo": frozenset({"publish"}),
    "docker": frozenset({"push"}), "podman": frozenset({"push"}),
    "gem": frozenset({"push"}), "poetry": frozenset({"publish"}), "uv": frozenset({"publish"}),
    "flit": frozenset({"publish"}), "hatch": frozenset({"publish"}), "mvn": frozenset({"deploy"}),
    "gradle": frozenset({"publish"}), "helm": frozenset({"push"}), "dotnet": frozenset({"nuget"}),
    "vsce": frozenset({"publish"}), "pdm": frozenset({"publish"}),
}  # fmt: skip
_DESTROY_SUBCOMMANDS: dict[str, frozenset[str]] = {
    "terraform": frozenset({"destroy"}), "tofu": frozenset({"destroy"}),
    "kubectl": frozenset({"delete", "drain"}), "helm": frozenset({"uninstall", "delete", "del"}),
    "pulumi": frozenset({"destroy"}), "cdk": frozenset({"destroy"}),
    "eksctl": frozenset({"delete"}), "serverless": frozenset({"remove"}),
    "sls": frozenset({"remove"}), "vercel": frozenset({"remove", "rm"}),
    "fly": frozenset({"destroy"}), "flyctl": frozenset({"destroy"}),
    "heroku": frozenset({"apps:destroy"}), "oc": frozenset({"delete"}),
}  # fmt: skip
_CLOUD_DELETE = re.compile(r"^(delete|delete-[\w-]+|terminate-instances|rb|destroy|purge)$")
_DATABASE_CLIENTS = frozenset(
    {"psql", "mysql", "mariadb", "sqlite3", "sqlcmd", "mongo", "mongosh", "cockroach",
     "clickhouse-client", "clickhouse", "duckdb", "redis-cli", "valkey-cli", "cqlsh", "snowsql",
     "bq", "mysqladmin"}
)  # fmt: skip
_DROP_SQL = re.compile(
    r"\b(drop\s+(database|table|schema|keyspace|collection)|truncate\s+(table\s+)?\w|"
    r"flushall|flushdb|dropdatabase\s*\(|\.drop\s*\(\s*\))",
    re.IGNORECASE,
)
_DROP_TASKS = re.compile(r"^(db:drop|db:reset|db:schema:load|db:purge|flush|reset)$")
_DISK_TOOLS = frozenset(
    {"dd", "fdisk", "sfdisk", "gdisk", "sgdisk", "cfdisk", "parted", "wipefs", "shred",
     "mkswap", "blkdiscard", "cryptsetup", "diskutil", "format", "hdparm", "badblocks"}
)  # fmt: skip
_WRITERS_ALL = frozenset({"rm", "rmdir", "unlink", "shred", "touch", "mkdir", "truncate", "tee",
                          "mv", "mkfifo"})  # fmt: skip
_WRITERS_LAST = frozenset({"cp", "install", "ln", "rsync", "scp"})
_FETCH = re.compile(r"\b(curl|wget|fetch|http|iwr|Invoke-WebRequest)\b")


def detect(parsed: ParsedCommand, cwd: str | None) -> tuple[Risk, ...]:
    """Every risk of `parsed` run in `cwd`, each once, in the order found."""
    found: dict[tuple[str, str], Risk] = {}
    here = cwd
    for command in parsed.commands:
        for risk in _command_risks(command, here, cwd):
            found.setdefault((risk.code, risk.text), risk)
        if command.program in ("cd", "pushd") and not command.context:
            here = _cd(here, command)
    if not parsed.analysable:
        text = "; ".join(parsed.reasons) or "nothing to analyse"
        found.setdefault(("unanalysable", text), Risk("unanalysable", _clip(text, 300)))
    return tuple(found.values())


def _clip(text: str, size: int = 120) -> str:
    return text if len(text) <= size else text[: size - 1] + "…"


def _names(values: Iterable[str], most: int = 4) -> str:
    items = list(dict.fromkeys(values))
    shown = ", ".join(_clip(v, 60) for v in items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "") or "?"


def _cd(here: str | None, command: SimpleCommand) -> str | None:
    targets = [w for w in command.words if not w.text.startswith("-")]
    if not targets:
        return "~"
    target = _resolve(targets[0], here)
    return target if target not in (None, "") else None


def _resolve(word: Word, here: str | None) -> str | None:
    """The path a word names, absolute or `~/…` (None: not known before it runs)."""
    text = word.text
    for home in ("$HOME", "${HOME}"):
        if text == home or text.startswith(home + "/"):
            text = "~" + text[len(home) :]
    if text == "~" or text.startswith("~/"):
        return "~" + posixpath.normpath(text[1:] or "/").rstrip("/") if text != "~" else "~"
    if not word.static and not text.startswith("/"):
        return None
    if text.startswith("/"):
        return posixpath.normpath(text)
    if here is None:
        rel = posixpath.normpath(text)
        return rel
    if here == "~" or here.startswith("~/"):
        return posixpath.normpath(posixpath.join(here, text))
    return posixpath.normpath(posixpath.join(here, text))


def _outside(path: str, cwd: str | None) -> bool:
    if path in HARMLESS_DEVICES:
        return False
    if not path.startswith(("/", "~")):
        return path == ".." or path.startswith("../")
    if cwd is None:
        return True
    base = posixpath.normpath(cwd)
    return not (path == base or path.startswith(base.rstrip("/") + "/"))


def _sensitive(path: str) -> bool:
    if path in HARMLESS_DEVICES or path.startswith("/dev/fd/"):
        return False
    if any(path == d or path.startswith(d + "/") for d in _SENSITIVE_DIRS):
        return True
    return bool(_SENSITIVE_NAMES.search(path))


def _option_values(c: SimpleCommand, names: Iterable[str]) -> list[str]:
    wanted = set(names)
    out: list[str] = []
    args = c.args
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in wanted and eq:
            out.append(value)
        elif arg in wanted and i + 1 < len(args):
            out.append(args[i + 1])
    return out


def write_targets(c: SimpleCommand) -> list[Word]:
    """The files a command writes (or deletes), as far as its arguments say."""
    targets = [r.target for r in c.redirects if r.writes_file and r.target is not None]
    program = c.program or ""
    by_text = {w.text: w for w in c.words}

    def words(texts: Iterable[str]) -> list[Word]:
        return [by_text.get(t, Word(t)) for t in texts]

    positionals = list(c.positionals)
    if program in _WRITERS_ALL:
        targets += words(positionals)
    elif program in _WRITERS_LAST and len(positionals) >= 2:
        targets += words(positionals[-1:])
        targets += words(_option_values(c, ("-t", "--target-directory")))
    elif program in ("chmod", "chown", "chgrp"):
        targets += words(positionals[1:])
    elif program in ("sed", "perl") and c.flags & {"-i", "--in-place"}:
        targets += words(positionals[1:] if "-e" not in c.flags else positionals)
    elif program == "dd":
        targets += words(a[3:] for a in c.args if a.startswith("of="))
    elif program == "curl":
        targets += words(_option_values(c, ("-o", "--output", "--output-dir")))
    elif program == "wget":
        targets += words(_option_values(c, ("-O", "-P")))
    elif program == "tar" and c.flags & {"-x", "--extract"}:
        targets += words(_option_values(c, ("-C", "--directory")))
    elif program == "git" and c.subcommand == "clone" and len(positionals) >= 3:
        targets += words(positionals[2:3])
    return targets


def _command_risks(c: SimpleCommand, here: str | None, cwd: str | None) -> Iterator[Risk]:
    """`c`'s risks; relative paths are in `here` (cwd after any `cd`), judged against `cwd`."""
    program = c.program
    if program is None:
        return
    yield from _shell_risks(c)
    yield from _delete_risks(c)
    if program == "git":
        yield from _git_risks(c)
    for wrapper in c.wrappers:
        spec = WRAPPERS.get(wrapper.split()[0])
        if spec is not None and spec.privileged:
            yield Risk("privilege", f"{program} runs as another user via {wrapper}")
    writer = "a redirection" if program == ":" else program  # `> f` alone runs as `:`
    for target in write_targets(c):
        path = _resolve(target, here)
        if path is None:
            continue
        if _sensitive(path):
            yield Risk("writes_sensitive_path", f"{writer} writes {target.text}")
        if _outside(path, cwd):
            where = f"outside {cwd}" if cwd else "outside the working directory"
            yield Risk("writes_outside_cwd", f"{writer} writes {target.text} ({where})")
    yield from _credential_risks(c)
    yield from _permission_risks(c)
    yield from _tool_risks(c)


def _shell_risks(c: SimpleCommand) -> Iterator[Risk]:
    program = c.program or ""
    runs_code = program in SHELLS or program in INTERPRETERS
    if runs_code and c.stdin == "pipe" and not _has_script(c):
        yield Risk("pipe_to_shell", f"{program} runs what a pipe feeds it")
    if runs_code or program in ("eval", "source", "."):
        sources = [w for w in c.words if not w.static]
        if c.stdin is not None and not _has_script(c):
            sources += [r.target for r in c.redirects if r.target is not None and r.op in (
                "<", "<<", "<<<")]  # fmt: skip
        fetched = [w.text for w in sources if (_FETCH.search(w.text) and "$(" in w.text)
                   or (w.text.startswith("<(") and _FETCH.search(w.text))]  # fmt: skip
        if fetched:
            yield Risk("pipe_to_shell", f"{program} runs code fetched by {_clip(fetched[0], 80)}")


def _has_script(c: SimpleCommand) -> bool:
    """An interpreter given a script or `-c`/`-e` code reads no code from its input."""
    if c.program in SHELLS:
        return False  # a shell fed by a pipe with a script is unusual; judged as fed
    return any(p not in ("-",) for p in c.positionals) or bool(c.flags & {"-c", "-e", "-m"})


def _delete_risks(c: SimpleCommand) -> Iterator[Risk]:
    program = c.program
    if program == "rm" and "-r" in c.flags:
        yield Risk("recursive_delete", f"rm -r of {_names(c.positionals)}")
    elif program == "find" and "-delete" in c.flags:
        yield Risk("recursive_delete", f"find -delete under {_names(c.positionals[:1] or ['.'])}")
    elif program == "git" and c.subcommand == "clean" and c.flags & {"-d", "-x", "-X"}:
        yield Risk("recursive_delete", "git clean removes untracked files and directories")
    elif program == "rsync" and any(f.startswith("--delete") for f in c.flags):
        yield Risk("recursive_delete", f"rsync --delete into {_names(c.positionals[-1:])}")


def _git_risks(c: SimpleCommand) -> Iterator[Risk]:
    sub = c.subcommand
    flags = c.flags
    if sub == "push":
        refspecs = list(c.positionals[2:])
        forced = flags & {"--force", "--force-with-lease", "--force-if-includes", "--mirror"}
        plus = [r for r in refspecs if r.startswith("+")]
        if forced or plus:
            how = ", ".join(sorted(forced)) or f"+{plus[0].lstrip('+')}"
            yield Risk("force_push", f"git push {how}")
            yield Risk("history_rewrite", f"git push {how} rewrites the remote's history")
        protected = [r for r in refspecs if _PROTECTED.fullmatch(r.lstrip("+").rsplit(":", 1)[-1])]
        if protected:
            yield Risk("push_to_protected", f"git push to {_names(protected)}")
        elif flags & {"--all", "--mirror", "--branches"}:
            yield Risk("push_to_protected", "git push of every branch (main included)")
    elif sub == "reset" and "--hard" in flags:
        yield Risk("history_rewrite", "git reset --hard discards commits and changes")
    elif sub == "rebase" and not flags & {"--abort", "--quit"}:
        yield Risk("history_rewrite", "git rebase rewrites commits")
    elif sub in ("filter-branch", "filter-repo"):
        yield Risk("history_rewrite", f"git {sub} rewrites the history")
    elif sub == "commit" and "--amend" in flags:
        yield Risk("history_rewrite", "git commit --amend rewrites the last commit")
    elif sub == "branch" and flags & {"-D", "--force"}:
        yield Risk("history_rewrite", "git branch -D deletes an unmerged branch")


def _credential_risks(c: SimpleCommand) -> Iterator[Risk]:
    program = c.program or ""
    reads = [w.text for w in c.words] + [
        r.target.text for r in c.redirects if r.reads_file and r.target is not None
    ]
    found = [t for t in reads if _CREDENTIALS.search(t)]
    if found:
        yield Risk("reads_credentials", f"{program} touches {_names(found)}")
    key = (program, c.subcommand if program not in ("printenv", "env") else None)
    if program == "env" and c.args:
        key = ("", None)
    if key in _TOKEN_COMMANDS:
        yield Risk("reads_credentials", _TOKEN_COMMANDS[key])
    if (
        program == "kubectl"
        and c.subcommand == "get"
        and any(p.startswith("secret") for p in c.positionals[1:])
    ):
        yield Risk("reads_credentials", "kubectl get secrets prints credentials")


def _permission_risks(c: SimpleCommand) -> Iterator[Risk]:
    program = c.program
    if program == "chmod":
        mode = c.positionals[0] if c.positionals else ""
        reasons = []
        if "-R" in c.flags:
            reasons.append("recursively")
        if re.fullmatch(r"0?[0-7]?7[0-7]7|0?[0-7]?[0-7][0-7][2367]", mode):
            reasons.append(f"to {mode} (world-writable)")
        elif re.search(r"(^|,)[ugo]*[ao]+[ugo]*\+[rwxXst]*w", mode) or mode in ("+w", "a+w"):
            reasons.append(f"{mode} (world-writable)")
        if re.fullmatch(r"0?[4-7][0-7]{3}", mode) or re.search(r"\+[rwxX]*s", mode):
            reasons.append(f"{mode} (setuid/setgid)")
        if reasons:
            yield Risk(
                "permission_change", f"chmod {' '.join(reasons)} on {_names(c.positionals[1:])}"
            )
    elif program in ("chown", "chgrp") and "-R" in c.flags:
        yield Risk("permission_change", f"{program} -R on {_names(c.positionals[1:])}")
    elif program == "setfacl" and c.flags & {"-R", "--recursive"}:
        yield Risk("permission_change", "setfacl -R")


def _tool_risks(c: SimpleCommand) -> Iterator[Risk]:
    program = c.program or ""
    sub = c.subcommand
    publishes = _PUBLISH.get(program)
    if publishes and sub in publishes:
        yield Risk("publish", f"{program} {sub}")
    elif (
        program in ("docker", "podman")
        and sub in ("image", "buildx", "build")
        and ("push" in c.positionals[1:2] or "--push" in c.flags)
    ):
        yield Risk("publish", f"{program} {sub} push")
    elif program == "gh" and sub == "release" and c.positionals[1:2] == ("create",):
        yield Risk("publish", "gh release create")
    elif program == "python" and "twine" in c.positionals[:1]:
        yield Risk("publish", "twine upload")
    destroys = _DESTROY_SUBCOMMANDS.get(program)
    if destroys and sub in destroys:
        yield Risk("infra_destroy", f"{program} {sub} {_names(c.positionals[1:], 2)}".strip())
    elif (
        program in ("terraform", "tofu")
        and sub == "apply"
        and c.flags & {"-auto-approve", "-destroy"}
    ):
        yield Risk(
            "infra_destroy",
            f"{program} apply {' '.join(sorted(c.flags & {'-auto-approve', '-destroy'}))}",
        )
    elif program == "pulumi" and sub == "up" and c.flags & {"--yes", "-y", "--skip-preview"}:
        yield Risk("infra_destroy", "pulumi up --yes applies without a preview")
    elif program in ("aws", "gcloud", "az", "doctl", "linode-cli", "hcloud", "gsutil"):
        deletes = [p for p in c.positionals if _CLOUD_DELETE.match(p)]
        if deletes or (program == "aws" and sub == "s3" and "rm" in c.positionals[1:2]):
            yield Risk("infra_destroy", f"{program} {' '.join(c.positionals[:3])}")
    if program in _DATABASE_CLIENTS:
        texts = [w.text for w in c.words] + ([c.stdin_text] if c.stdin_text else [])
        hit = next((m.group(0) for t in texts for m in [_DROP_SQL.search(t)] if m), None)
        if hit:
            yield Risk("database_drop", f"{program}: {hit}")
    elif program in ("dropdb", "dropuser") or (program == "mysqladmin" and sub == "drop"):
        yield Risk("database_drop", f"{program} {_names(c.positionals)}")
    elif program in ("rails", "rake", "bin/rails") and sub and _DROP_TASKS.match(sub):
        yield Risk("database_drop", f"{program} {sub}")
    elif program == "prisma" and c.positionals[:2] == ("migrate", "reset"):
        yield Risk("database_drop", "prisma migrate reset")
    elif program in ("python", "python3") and "flush" in c.positionals[1:2]:
        yield Risk("database_drop", "manage.py flush")
    if program in _DISK_TOOLS or program.startswith(("mkfs", "mke2fs")):
        yield Risk("disk_tool", f"{program} {_names(c.args, 3)}".strip())


__all__ = ["RiskCode", "detect", "write_targets"]
