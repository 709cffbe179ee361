"""The shipped tables: option spellings per program, wrappers and how they take options,
shells and interpreters, each entry with a short why.

An option group is written `"-r -R --recursive"`: the first spelling is the canonical one
rules are compared in, a spelling ending in `=` takes a value (`"-o= --output="`: `-o FILE`,
`-oFILE`, `--output FILE`, `--output=FILE`). Read by `normalise.py`; the read-only list is
in `readonly.py`, the risk lists in `risks.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class OptionTable:
    """How one program (or one git subcommand) reads its options."""

    why: str
    groups: tuple[str, ...]
    #: GNU getopt_long, git's parse-options, optparse, nopt: a unique prefix of a long
    #: option is that option (`rm --rec` is `rm --recursive`).
    abbrev: bool = False
    #: `-name`-style long options (find, terraform): a single-dash word is never split.
    single_dash_long: bool = False
    #: Go's flag package: `-flag=false` turns a boolean flag off.
    go_bools: bool = False
    canonical: dict[str, str] = field(default_factory=dict, compare=False)
    takes_value: frozenset[str] = field(default=frozenset(), compare=False)
    longs: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        canonical: dict[str, str] = {}
        value: set[str] = set()
        for group in self.groups:
            spellings = group.split()
            first = spellings[0].rstrip("=")
            for spelling in spellings:
                name = spelling.rstrip("=")
                canonical[name] = first
                if spelling.endswith("="):
                    value.add(name)
        object.__setattr__(self, "canonical", canonical)
        object.__setattr__(self, "takes_value", frozenset(value))
        object.__setattr__(self, "longs", tuple(s for s in canonical if s.startswith("--")))

    def resolve(self, spelling: str) -> str | None:
        """The table's own spelling for `spelling` (an unambiguous prefix of a long option
        counts where the program accepts one); None when the table does not know it."""
        if spelling in self.canonical:
            return spelling
        if self.abbrev and spelling.startswith("--") and len(spelling) > 3:
            found = [s for s in self.longs if s.startswith(spelling)]
            if len(found) == 1:
                return found[0]
            if len({self.canonical[s] for s in found}) == 1 and found:
                return found[0]
        return None


def _t(
    why: str,
    *groups: str,
    abbrev: bool = False,
    single_dash_long: bool = False,
    go_bools: bool = False,
) -> OptionTable:
    return OptionTable(why, groups, abbrev, single_dash_long, go_bools)


_GNU_COMMON = ("--help", "--version")

#: Option spellings for the programs where a rule's `flags` must see through spelling.
OPTIONS: dict[str, OptionTable] = {
    "rm": _t(
        "GNU/BSD rm: -r/-R/--recursive are one option; GNU takes abbreviated long options",
        "-r -R --recursive", "-f --force", "-i", "-I", "--interactive", "-d --dir", "-v --verbose",
        "--one-file-system", "--no-preserve-root", "--preserve-root", "-P", "-W", "-x",
        *_GNU_COMMON, abbrev=True,
    ),
    "rmdir": _t(
        "GNU rmdir", "-p --parents", "-v --verbose", "--ignore-fail-on-non-empty", *_GNU_COMMON,
        abbrev=True,
    ),
    "cp": _t(
        "GNU/BSD cp: -r/-R/--recursive are one option; -t takes the target directory",
        "-r -R --recursive", "-f --force", "-a --archive", "-i --interactive", "-n --no-clobber",
        "-u --update", "-v --verbose", "-p", "--preserve", "-l --link", "-s --symbolic-link",
        "-t= --target-directory=", "-T --no-target-directory", "-b", "--backup", "-S= --suffix=",
        "-L --dereference", "-P --no-dereference", "-H", "-x --one-file-system", "--parents",
        "--remove-destination", "--reflink", "--sparse=", "-d", "--attributes-only",
        "--strip-trailing-slashes", "-Z", "--context", *_GNU_COMMON, abbrev=True,
    ),
    "mv": _t(
        "GNU/BSD mv", "-f --force", "-i --interactive", "-n --no-clobber", "-u --update",
        "-v --verbose", "-t= --target-directory=", "-T --no-target-directory", "-b", "--backup",
        "-S= --suffix=", "--strip-trailing-slashes", "-Z --context", *_GNU_COMMON, abbrev=True,
    ),
    "chmod": _t(
        "GNU/BSD chmod: only -R is recursive (-r, -w, -x are modes: remove read/write/exec)",
        "-R --recursive", "-f --silent --quiet", "-v --verbose", "-c --changes", "--reference=",
        "--preserve-root", "--no-preserve-root", *_GNU_COMMON, abbrev=True,
    ),
    "chown": _t(
        "GNU/BSD chown", "-R --recursive", "-f --silent --quiet", "-v --verbose", "-c --changes",
        "-h --no-dereference", "--dereference", "--reference=", "--from=", "-H", "-L", "-P",
        "--preserve-root", "--no-preserve-root", *_GNU_COMMON, abbrev=True,
    ),
    "curl": _t(
        "curl: values attach to short options (-oFILE); no abbreviated long options",
        "-o= --output=", "-O --remote-name", "-X= --request=", "-d= --data=", "--data-binary=",
        "--data-raw=", "--data-urlencode=", "-F= --form=", "-H= --header=", "-u= --user=",
        "-k --insecure", "-L --location", "-s --silent", "-S --show-error", "-f --fail",
        "-T= --upload-file=", "-K= --config=", "-x= --proxy=", "-A= --user-agent=", "-b= --cookie=",
        "-c= --cookie-jar=", "-e= --referer=", "-I --head", "-i --include", "-v --verbose",
        "-w= --write-out=", "-m= --max-time=", "--connect-timeout=", "-r= --range=",
        "-C= --continue-at=", "-E= --cert=", "--key=", "--cacert=", "-G --get",
        "-J --remote-header-name", "-N --no-buffer", "-# --progress-bar", "--compressed",
        "--retry=", "-q --disable", "-Z --parallel", "--create-dirs", "--json=", "--url=",
        "--output-dir=", "-D= --dump-header=", "--fail-with-body", "-Y= --speed-limit=",
        "-y= --speed-time=", "-z= --time-cond=", *_GNU_COMMON,
    ),
    "wget": _t(
        "GNU wget: -nc/-nd/-nH/-np/-nv are two-letter short options", "-O= --output-document=",
        "-P= --directory-prefix=", "-q --quiet", "-c --continue", "-r --recursive",
        "-N --timestamping", "-nc --no-clobber", "-o= --output-file=", "-a= --append-output=",
        "-i= --input-file=", "-U= --user-agent=", "--header=", "--post-data=", "--post-file=",
        "--method=", "--body-data=", "--body-file=", "-e= --execute=", "-x --force-directories",
        "-m --mirror", "-l= --level=", "-k --convert-links", "-p --page-requisites",
        "-np --no-parent", "-nv --no-verbose", "-nd --no-directories", "-nH --no-host-directories",
        "-t= --tries=", "-T= --timeout=", "-w= --wait=", "--no-check-certificate",
        "-S --server-response", "--spider", "-b --background", "-4 --inet4-only", "-6 --inet6-only",
        *_GNU_COMMON, abbrev=True,
    ),
    "kubectl": _t(
        "kubectl (pflag): global options with values come before the subcommand too",
        "-n= --namespace=", "--context=", "--kubeconfig=", "-s= --server=", "--cluster=", "--user=",
        "--token=", "--as=", "--as-group=", "--as-uid=", "--request-timeout=", "-v= --v=",
        "--vmodule=", "--cache-dir=", "--certificate-authority=", "--client-certificate=",
        "--client-key=", "--tls-server-name=", "--insecure-skip-tls-verify", "-A --all-namespaces",
        "-l= --selector=", "-f= --filename=", "-o= --output=", "--force", "--grace-period=",
        "--all", "-R --recursive", "--dry-run=", "-k= --kustomize=", "--wait", "--cascade=",
        "--now", "-i --stdin", "-t --tty", "-c= --container=", "-w --watch", "--field-selector=",
        "--timeout=", "--overwrite", "--record", "--replicas=", "--image=", "-p= --patch=",
        "--type=", "--ignore-daemonsets", "--delete-emptydir-data", "--show-labels",
    ),
    "terraform": _t(
        "terraform (Go flags): -auto-approve and --auto-approve are the same; -x=false is off",
        "-auto-approve --auto-approve", "-destroy --destroy", "-target= --target=", "-var= --var=",
        "-var-file= --var-file=", "-chdir= --chdir=", "-input= --input=", "-lock= --lock=",
        "-lock-timeout= --lock-timeout=", "-out= --out=", "-refresh-only --refresh-only",
        "-refresh= --refresh=", "-replace= --replace=", "-parallelism= --parallelism=",
        "-json --json", "-no-color --no-color", "-upgrade --upgrade", "-reconfigure --reconfigure",
        "-backend-config= --backend-config=", "-force --force", "-state= --state=",
        "-help --help -h", "-version --version -v", single_dash_long=True, go_bools=True,
    ),
    "docker": _t(
        "docker CLI: global options with values come before the subcommand", "-H= --host=",
        "-c= --context=", "--config=", "-l= --log-level=", "--tlscacert=", "--tlscert=",
        "--tlskey=", "--tls", "--tlsverify", "-D --debug", "-f --force", "-a --all", "-q --quiet",
        "--volumes", "-e= --env=", "-p= --publish=", "-d --detach", "-i --interactive", "--rm",
        "--privileged", "--name=", "-u= --user=", "-w= --workdir=", "--network=", "--entrypoint=",
        "--mount=", "--pid=", "--cap-add=", "--build-arg=", "--no-cache", "--target=",
        "--platform=", "--push", "--filter=", "--format=", "--env-file=", "--gpus=", "--restart=",
        "--label=", "--all-tags", "--time=",
    ),
    "npm": _t(
        "npm (nopt): abbreviated long options are accepted", "-g --global", "-D --save-dev",
        "-S --save", "-E --save-exact", "-O --save-optional", "-f --force", "-w= --workspace=",
        "--prefix= -C=", "--registry=", "--tag=", "--access=", "--dry-run", "-y --yes",
        "-s --silent", "-q --quiet", "--otp=", "-ws --workspaces", "--ignore-scripts",
        "--legacy-peer-deps", "--no-save", "--loglevel=", "--userconfig=", "--cache=", "--omit=",
        "--include=", "--production", "--json", "--depth=", "--all", "-a", "-l --long",
        "-v --version", "-h --help", abbrev=True,
    ),
    "pip": _t(
        "pip (optparse): abbreviated long options are accepted", "-r= --requirement=",
        "-e= --editable=", "-U --upgrade", "-t= --target=", "--user", "--pre", "-i= --index-url=",
        "--extra-index-url=", "--no-deps", "--force-reinstall", "-I --ignore-installed",
        "-c= --constraint=", "--break-system-packages", "--no-cache-dir", "-q --quiet",
        "-v --verbose", "--prefix=", "--root=", "--src=", "--upgrade-strategy=",
        "-f= --find-links=", "--trusted-host=", "-y --yes", "--proxy=", "--cache-dir=", "--log=",
        "--python=", "--isolated", "--require-virtualenv", "--disable-pip-version-check",
        "--timeout=", "--retries=", "--cert=", "--client-cert=", "--exists-action=", "--no-input",
        "--no-color", "--no-index", "--only-binary=", "--no-binary=", "--dry-run", "--report=",
        "-V --version", "-h --help", abbrev=True,
    ),
    "git": _t(
        "git's own options before the subcommand (-C, -c, --git-dir …)", "-C=", "-c=", "--git-dir=",
        "--work-tree=", "--namespace=", "--super-prefix=", "--config-env=", "--list-cmds=",
        "--exec-path", "-p --paginate", "-P --no-pager", "--bare", "--no-replace-objects",
        "--literal-pathspecs", "--glob-pathspecs", "--noglob-pathspecs", "--icase-pathspecs",
        "--no-optional-locks", "--html-path", "--man-path", "--info-path", "--no-lazy-fetch",
        "--no-advice", "-v --version", "-h --help", abbrev=True,
    ),
    "git push": _t(
        "git push: -f is --force; --force-with-lease and +refspecs force too (see risks)",
        "--force -f", "--force-with-lease", "--force-if-includes", "-u --set-upstream",
        "-d --delete", "--all", "--branches", "--mirror", "--tags", "-n --dry-run", "--no-verify",
        "-o= --push-option=", "--follow-tags", "-q --quiet", "-v --verbose", "--atomic", "--prune",
        "--repo=", "--receive-pack= --exec=", "--porcelain", "--signed", "--no-force-with-lease",
        "-4 --ipv4", "-6 --ipv6", abbrev=True,
    ),
    "git reset": _t(
        "git reset", "--hard", "--soft", "--mixed", "--keep", "--merge", "-q --quiet", "-p --patch",
        "--recurse-submodules", abbrev=True,
    ),
    "git clean": _t(
        "git clean: -f is --force (-x, -X, -d choose what goes)", "--force -f", "-d", "-x", "-X",
        "--dry-run -n", "--interactive -i", "--quiet -q", "--exclude= -e=", abbrev=True,
    ),
    "git checkout": _t(
        "git checkout: -f is --force", "--force -f", "-b=", "-B=", "--orphan=", "--patch -p",
        "--quiet -q", "--track -t", "--detach", "--ours", "--theirs", "--merge -m", abbrev=True,
    ),
    "git switch": _t(
        "git switch", "--force --discard-changes -f", "--create= -c=", "--force-create= -C=",
        "--orphan=", "--detach -d", "--track -t", "--quiet -q", abbrev=True,
    ),
    "git branch": _t(
        "git branch: listing options vs create/delete/move", "--delete -d", "-D", "--force -f",
        "--move -m", "-M", "--copy -c", "-C", "--list -l", "--all -a", "--remotes -r",
        "--verbose -v", "-vv", "--show-current", "--format=", "--contains=", "--no-contains=",
        "--merged=", "--no-merged=", "--set-upstream-to= -u=", "--unset-upstream", "--sort=",
        "--points-at=", "--edit-description", "--column", "--no-column", "--ignore-case",
        abbrev=True,
    ),
    "git rebase": _t(
        "git rebase: --exec runs a shell command per commit", "--interactive -i", "--onto=",
        "--continue", "--abort", "--skip", "--exec= -x=", "--root", "--autosquash",
        "--force-rebase -f", "--update-refs", "--autostash", abbrev=True,
    ),
    "git commit": _t(
        "git commit: -m takes the message (so `-m -rf` is a message, not options)",
        "--message= -m=", "--all -a", "--amend", "--file= -F=", "--reuse-message= -C=",
        "--reedit-message= -c=", "--no-verify -n", "--signoff -s", "--gpg-sign -S", "--allow-empty",
        "--quiet -q", "--verbose -v", "--patch -p", "--fixup=", "--squash=", "--author=", "--date=",
        "--no-edit", "--dry-run", abbrev=True,
    ),
    "git tag": _t(
        "git tag: listing options vs create/delete", "--delete -d", "--annotate -a",
        "--message= -m=", "--force -f", "--list -l", "--sign -s", "--file= -F=",
        "--local-user= -u=", "-n", "--contains=", "--no-contains=", "--points-at=", "--sort=",
        "--format=", "--merged=", "--no-merged=", "--column", abbrev=True,
    ),
    "git log": _t(
        "git log/show/diff: --output writes a file; --ext-diff and --textconv run programs",
        "--output=", "--patch -p", "--stat", "--oneline", "--max-count= -n=", "--ext-diff",
        "--no-ext-diff", "--textconv", "--no-textconv", "--graph", "--all", "--author=", "--since=",
        "--until=", "--format=", "--pretty=", "--grep=", "--name-only", "--name-status", "--follow",
        "--reverse", "--decorate", abbrev=True,
    ),
    "git config": _t(
        "git config: getting and listing vs setting", "--get", "--get-all", "--get-regexp",
        "--get-urlmatch", "--list -l", "--unset", "--unset-all", "--add", "--replace-all",
        "--rename-section", "--remove-section", "--edit -e", "--global", "--system", "--local",
        "--worktree", "--file= -f=", "--show-origin", "--show-scope", "--name-only", "--null -z",
        "--type=", "--default=", abbrev=True,
    ),
}  # fmt: skip
OPTIONS["tofu"] = OPTIONS["terraform"]
OPTIONS["podman"] = OPTIONS["docker"]
OPTIONS["chgrp"] = OPTIONS["chown"]
for _sub in ("show", "diff", "whatchanged", "shortlog"):
    OPTIONS[f"git {_sub}"] = OPTIONS["git log"]

#: Programs whose subcommand may have aliases: alias → the name rules use.
SUBCOMMAND_ALIASES: dict[str, dict[str, str]] = {
    "npm": {
        "i": "install", "in": "install", "ins": "install", "inst": "install",
        "insta": "install", "instal": "install", "isnt": "install", "isnta": "install",
        "isntal": "install", "isntall": "install", "add": "install",
        "ci": "ci", "clean-install": "ci", "ic": "ci", "install-clean": "ci",
        "isntall-clean": "ci", "rm": "uninstall", "r": "uninstall", "un": "uninstall",
        "unlink": "uninstall", "remove": "uninstall", "t": "test", "tst": "test",
        "run-script": "run", "rum": "run", "urn": "run", "x": "exec", "up": "update",
        "upgrade": "update", "udpate": "update", "ls": "ls", "list": "ls", "la": "ls",
        "ll": "ls", "c": "config", "s": "search", "se": "search", "find": "search",
        "v": "view", "info": "view", "show": "view", "author": "owner", "it": "install-test",
    },
}  # fmt: skip


@dataclass(frozen=True)
class Wrapper:
    """A program that runs another program given by its arguments."""

    why: str
    #: Options that take a value (next word, or attached: `-uroot`, `--user=root`).
    value_options: frozenset[str] = frozenset()
    #: Options that take none.
    flag_options: frozenset[str] = frozenset()
    #: Words between its options and the command (timeout DURATION, flock FILE, chroot DIR).
    positionals: int = 0
    #: `NAME=value` words may come before the command (env, sudo).
    assignments: bool = False
    #: Runs the command as someone else (sudo, doas, su): never read-only, a `privilege` risk.
    privileged: bool = False
    #: Options whose value is a shell command string (`flock -c 'cmd'`, `su -c 'cmd'`).
    string_options: frozenset[str] = frozenset()
    #: Words after the program name before its options (`uv run`, `poetry run`).
    subcommand: str | None = None
    #: Keeps a read-only command read-only (false: nohup writes nohup.out, sudo …).
    read_only: bool = True


def _w(why: str, values: str = "", flags: str = "", **kw: object) -> Wrapper:
    return Wrapper(
        why=why,
        value_options=frozenset(values.split()),
        flag_options=frozenset(flags.split()),
        **kw,  # type: ignore[arg-type]
    )


WRAPPERS: dict[str, Wrapper] = {
    "env": _w(
        "runs COMMAND with NAME=value set; -S splits a string into the command",
        "-u --unset -C --chdir -S --split-string --block-signal --default-signal "
        "--ignore-signal -a --argv0",
        "-i --ignore-environment -0 --null -v --debug --list-signal-handling -",
        assignments=True,
    ),
    "sudo": _w(
        "runs COMMAND as another user",
        "-u --user -g --group -h --host -p --prompt -C --close-from -D --chdir -r --role "
        "-t --type -T --command-timeout -U --other-user",
        "-A --askpass -b --background -B --bell -E --preserve-env -H --set-home -i --login "
        "-k --reset-timestamp -K --remove-timestamp -n --non-interactive -P "
        "--preserve-groups -S --stdin -s --shell",
        assignments=True, privileged=True, read_only=False,
    ),
    "doas": _w("runs COMMAND as another user", "-u -C", "-n -s", privileged=True,
               read_only=False),
    "pkexec": _w("runs COMMAND as another user", "--user", "--keep-cwd --disable-internal-agent",
                 privileged=True, read_only=False),
    "runuser": _w("runs COMMAND as another user", "-u --user -g --group -G --supp-group",
                  "-l --login -m -p --preserve-environment", privileged=True,
                  string_options=frozenset({"-c", "--command"}), read_only=False),
    "su": _w("runs -c COMMAND as another user (a login shell otherwise)",
             "-g --group -G --supp-group -s --shell", "-l --login -m -p --preserve-environment -",
             privileged=True, string_options=frozenset({"-c", "--command"}), read_only=False),
    "timeout": _w("runs COMMAND with a time limit (DURATION first)",
                  "-s --signal -k --kill-after", "--preserve-status --foreground -v --verbose",
                  positionals=1),
    "nice": _w("runs COMMAND at another priority", "-n --adjustment", ""),
    "ionice": _w("runs COMMAND at another I/O priority", "-c --class -n --classdata",
                 "-t --ignore"),
    "nohup": _w("runs COMMAND immune to hangups (may write nohup.out)", read_only=False),
    "stdbuf": _w("runs COMMAND with other stream buffering", "-i --input -o --output -e --error"),
    "setsid": _w("runs COMMAND in a new session", "", "-c --ctty -f --fork -w --wait"),
    "time": _w("times COMMAND (GNU time -o writes a file)", "-f --format -o --output",
               "-p --portability -a --append -v --verbose -q --quiet"),
    "command": _w("runs COMMAND skipping functions (-v/-V only print)", "", "-p"),
    "builtin": _w("runs a shell builtin"),
    "exec": _w("replaces the shell with COMMAND", "-a", "-c -l"),
    "coproc": _w("runs COMMAND as a coprocess"),
    "xargs": _w(
        "runs COMMAND with arguments read from its input (echo when none)",
        "-I -i -L -l -n -P -s -d -E -e -a --arg-file --delimiter --max-args --max-procs "
        "--max-lines --max-chars --eof --replace --process-slot-var",
        "-0 --null -r --no-run-if-empty -t --verbose -p --interactive -x --exit -o "
        "--open-tty --show-limits",
    ),
    "flock": _w("runs COMMAND holding a lock (FILE first; -c takes a string)",
                "-w --timeout -E --conflict-exit-code",
                "-s --shared -x -e --exclusive -u --unlock -n --nb --nonblock -o --close "
                "-F --no-fork --verbose", positionals=1,
                string_options=frozenset({"-c", "--command"})),
    "chroot": _w("runs COMMAND (a shell when none) with another root (NEWROOT first)",
                 "--userspec --groups", "--skip-chdir", positionals=1, privileged=True,
                 read_only=False),
    "watch": _w("runs its arguments through sh -c, repeatedly (-x: without a shell)",
                "-n --interval -d --differences -q --equexit --shotsfile",
                "-b --beep -c --color -C --no-color -e --errexit -g --chgexit -p --precise "
                "-t --no-title -w --no-wrap -x --exec -r --no-rerun"),
    "busybox": _w("runs the APPLET named by its first argument"),
    "toybox": _w("runs the APPLET named by its first argument"),
    "taskset": _w("runs COMMAND on some CPUs (MASK, or with -c a LIST, first)", "",
                  "-a --all-tasks -c --cpu-list", positionals=1),
    "chrt": _w("runs COMMAND with a scheduling policy (PRIORITY first)", "-T -P -D",
               "-b --batch -d --deadline -f --fifo -i --idle -o --other -r --rr -R "
               "--reset-on-fork -a --all-tasks -v --verbose", positionals=1),
    "unbuffer": _w("runs COMMAND with unbuffered output", "", "-p"),
    "caffeinate": _w("runs COMMAND keeping the machine awake", "-t -w", "-d -i -m -s -u"),
    "sg": _w("runs -c COMMAND with another group (GROUP first)", "", "", positionals=1,
             string_options=frozenset({"-c"}), privileged=True, read_only=False),
    "script": _w("runs -c COMMAND recording the terminal to a file",
                 "-E --echo -I --log-in -O --log-out -B --log-io -T --log-timing -m "
                 "--logging-format", "-a --append -e --return -f --flush -q --quiet",
                 string_options=frozenset({"-c", "--command"}), read_only=False),
    "uv": _w("`uv run COMMAND` runs COMMAND in the project's environment",
             "--with --with-editable --with-requirements --python -p --directory --project "
             "--package --extra --group --env-file --index --default-index --index-url",
             "--no-sync --frozen --locked --isolated --all-extras --no-dev --active "
             "--no-project -q --quiet -v --verbose --offline --no-env-file -m --module",
             subcommand="run", read_only=False),
    "poetry": _w("`poetry run COMMAND`", "-C --directory -P --project", "-q --quiet",
                 subcommand="run", read_only=False),
    "pipenv": _w("`pipenv run COMMAND`", "", "", subcommand="run", read_only=False),
    "pdm": _w("`pdm run COMMAND`", "-p --project", "", subcommand="run", read_only=False),
    "hatch": _w("`hatch run COMMAND`", "-e --env", "", subcommand="run", read_only=False),
    "rye": _w("`rye run COMMAND`", "", "", subcommand="run", read_only=False),
    "bundle": _w("`bundle exec COMMAND`", "", "", subcommand="exec", read_only=False),
    "direnv": _w("`direnv exec DIR COMMAND`", "", "", subcommand="exec", positionals=1,
                 read_only=False),
    "dotenv": _w("runs COMMAND with variables from .env files", "-e -c -v", "-o -p",
                 read_only=False),
    "mise": _w("`mise exec -- COMMAND`", "-C --cd", "", subcommand="exec", read_only=False),
    "conda": _w("`conda run COMMAND`", "-n --name -p --prefix", "--no-capture-output --live-stream",
                subcommand="run", read_only=False),
}  # fmt: skip

#: Shells: `-c STRING` is parsed again; fed by a pipe, here-doc or here-string they are
#: unanalysable (what they run is not on the command line, or is expanded first).
SHELLS = frozenset(
    {"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "yash", "posh", "rbash", "fish", "csh",
     "tcsh", "busybox-sh"}
)  # fmt: skip
#: Shell options that take a value (`bash -o pipefail -c …`, `bash --rcfile f`).
SHELL_VALUE_OPTIONS = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})
#: Interpreters: code piped into them is as opaque as a shell's (a `pipe_to_shell` risk).
INTERPRETERS = frozenset(
    {"python", "python2", "python3", "perl", "ruby", "node", "nodejs", "php", "deno", "bun",
     "lua", "Rscript", "osascript", "pwsh", "powershell", "tclsh", "irb", "jshell"}
)  # fmt: skip
#: Builtins that change what later words mean (`source` runs a file, `alias` redefines):
#: the whole command is unanalysable when one appears.
OPAQUE_BUILTINS: dict[str, str] = {
    "source": "runs the commands of a file in this shell",
    ".": "runs the commands of a file in this shell",
    "alias": "defines an alias: later words may run something else",
    "unalias": "changes what later words run",
    "hash": "can point a command name at any file (hash -p)",
    "enable": "can load or disable shell builtins",
}
#: Environment variables that change which program runs, or make one run code: setting
#: one makes the command unanalysable.
CODE_VARIABLES = frozenset(
    {"PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "DYLD_INSERT_LIBRARIES",
     "DYLD_LIBRARY_PATH", "BASH_ENV", "ENV", "PROMPT_COMMAND", "IFS", "PS4", "SHELLOPTS",
     "BASHOPTS", "GLOBIGNORE", "CDPATH", "PYTHONSTARTUP", "PYTHONPATH", "PERL5OPT", "PERL5LIB",
     "RUBYOPT", "NODE_OPTIONS", "GIT_EXEC_PATH", "GIT_SSH", "GIT_SSH_COMMAND",
     "GIT_EXTERNAL_DIFF", "GIT_CONFIG_COUNT", "GIT_CONFIG_PARAMETERS", "GIT_PAGER", "PAGER",
     "EDITOR", "VISUAL", "GIT_EDITOR", "GIT_SEQUENCE_EDITOR", "GIT_ASKPASS", "SSH_ASKPASS",
     "SUDO_ASKPASS", "MANPAGER", "LESSOPEN", "LESSCLOSE", "BROWSER"}
)  # fmt: skip
#: Variables a read-only command may be run with (`LC_ALL=C sort`, `NO_COLOR=1 git log`).
HARMLESS_VARIABLES = frozenset(
    {"LANG", "LANGUAGE", "TZ", "NO_COLOR", "FORCE_COLOR", "CLICOLOR", "CLICOLOR_FORCE", "TERM",
     "COLUMNS", "LINES", "CI", "GIT_TERMINAL_PROMPT", "GREP_COLORS", "LS_COLORS", "TIME_STYLE",
     "POSIXLY_CORRECT", "DEBIAN_FRONTEND", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED"}
)  # fmt: skip


def harmless_variable(name: str) -> bool:
    return name in HARMLESS_VARIABLES or name.startswith("LC_")
