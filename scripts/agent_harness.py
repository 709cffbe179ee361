"""The machinery of the real-client checks (`scripts/check_agents.py`): installing a CLI from
the npm registry, a private redis-server and `approval-bot serve` on loopback, a decider that
answers through `approval-bot approve` / `deny`, and one agent run per case."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from approvals._internal.store.connection import connect  # noqa: E402
from approvals._internal.store.keys import Keys  # noqa: E402
from approvals._internal.store.store import ApprovalStore  # noqa: E402
from bot.ops import embedded_redis  # noqa: E402
from bot.slack.render.request_message import request_message  # noqa: E402
from tests.support.credentials import API_TOKEN, UNKNOWN_API_TOKEN  # noqa: E402
from tests.support.fake_models import FakeModels, reason_text  # noqa: E402

PACKAGES = {
    "claude-code": ("@anthropic-ai/claude-code", "@anthropic-ai/claude-code-linux-x64", "claude"),
    "codex": (
        "@openai/codex",
        "@openai/codex-linux-x64",
        "vendor/x86_64-unknown-linux-musl/bin/codex",
    ),
}
TOKEN = API_TOKEN
PREFIX = "check"
#: The hook timeout the checks install (the bot answers 5 s before it), and the short one of
#: the hook-timeout finding, which waits for a bot told to wait 60 s.
RUN_TIMEOUT = 120.0


def first_line(text: str, limit: int = 90) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# -- installing the CLI ---------------------------------------------------------------------------


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "approval-bot" / "agents"


def install(agent: str, version: str) -> Path:
    """The native binary, installed from the npm registry on first use; exits 2 when it can't."""
    package, native, inner = PACKAGES[agent]
    where = cache_dir() / f"{agent}-{version}"
    binary = where / "node_modules" / native / inner
    if binary.exists():
        return binary
    npm = shutil.which("npm")
    if npm is None:
        print(f"cannot install {package}@{version}: npm is not on PATH", flush=True)
        sys.exit(2)
    where.mkdir(parents=True, exist_ok=True)
    say(f"installing {package}@{version} into {where} …")
    done = subprocess.run(
        [
            npm,
            "install",
            "--no-audit",
            "--no-fund",
            "--ignore-scripts",
            "--prefix",
            str(where),
            f"{package}@{version}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0 or not binary.exists():
        lines = [
            line.removeprefix("npm error").strip()
            for line in (done.stderr or done.stdout or "").splitlines()
            if line.strip() and "complete log" not in line and line.strip() != "npm error"
        ]
        why = next((line for line in lines if not line.startswith("code ")), None)
        why = why or next(iter(lines), "no output")
        if done.returncode == 0:
            why = f"the package has no {native} binary for this platform"
        print(f"cannot install {package}@{version} from the npm registry: {why}", flush=True)
        sys.exit(2)
    return binary


# -- the bot and its Redis ------------------------------------------------------------------------


class Bot:
    """A private redis-server and `approval-bot serve` against it, on loopback."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.redis: embedded_redis.EmbeddedRedis | None = None
        self.redis_port = embedded_redis.free_port()
        self.port = embedded_redis.free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{self.port}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVALS_"))}
        env.update(
            REDIS_URL=self.redis_url,
            APPROVALS_PREFIX=PREFIX,
            PORT=str(self.port),
            APPROVALS_API_TOKENS=TOKEN,
            APPROVALS_DEFAULT_CHANNEL="C0CHECK",
            APPROVALS_DATA_DIR=str(self.work / "bot-data"),
            LOG_LEVEL="WARNING",
        )
        return env

    def start_redis(self) -> None:
        self.redis = embedded_redis.start(port=self.redis_port)

    def stop_redis(self) -> None:
        if self.redis is not None:
            self.redis.stop()
            self.redis = None

    async def start(self) -> None:
        self.start_redis()
        log = (self.work / "bot.log").open("wb")
        self.proc = subprocess.Popen(  # noqa: ASYNC220 - started once, not waited on here
            [str(ROOT / ".venv" / "bin" / "approval-bot"), "serve"],
            env=self.env(),
            cwd=self.work,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the bot exited; see {self.work / 'bot.log'}")
            if await _http_ok(f"{self.url}/healthz"):
                return
            await asyncio.sleep(0.2)
        raise RuntimeError("the bot did not answer /healthz within 30 s")

    async def wait_healthy(self) -> None:
        for _ in range(100):
            if await _http_ok(f"{self.url}/healthz"):
                return
            await asyncio.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.stop_redis()


async def _http_ok(url: str) -> bool:
    import aiohttp

    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as response:
                return response.status == 200
    except Exception:
        return False


def _names(case: str, arguments: str) -> bool:
    """Whether a request's arguments are the call of `case` (`ran-deny-2`, not `ran-deny-23`)."""
    return re.search(rf"ran-{re.escape(case)}(?![0-9A-Za-z_-])", arguments) is not None


class Decider:
    """Decides pending requests as each case says, through `approval-bot approve` / `deny`."""

    def __init__(self, bot: Bot) -> None:
        self.bot = bot
        self.plans: dict[str, str | None] = {}  # case → "approve" | "deny" | None (leave)
        self.seen: dict[str, list[str]] = {}  # case → request ids the bot created
        self.call_ids: dict[str, str | None] = {}  # case → the created request's call id
        #: case → the *Why:* section of the Slack message the bot would post for its request
        self.why: dict[str, str] = {}
        self.decided: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    def reason(self, case: str) -> str:
        return f"not-now-{case}"

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            try:
                redis = connect(self.bot.redis_url, client_name="check-decider")
                store = ApprovalStore(redis, Keys(PREFIX))
                try:
                    while True:
                        for request in await store.list_pending():
                            arguments = json.dumps(request.event.arguments)
                            for case in self.plans:
                                if _names(case, arguments):
                                    self.call_ids.setdefault(case, request.event.call_id)
                                    self.why.setdefault(case, why_section(request))
                            await self._handle(request.id, arguments)
                        await asyncio.sleep(0.15)
                finally:
                    await redis.aclose()
            except asyncio.CancelledError:
                raise
            except Exception:
                await asyncio.sleep(0.3)  # Redis is down on purpose (the outage case)

    async def _handle(self, request_id: str, arguments: str) -> None:
        for case, plan in self.plans.items():
            if not _names(case, arguments):
                continue
            ids = self.seen.setdefault(case, [])
            if request_id not in ids:
                ids.append(request_id)
            if plan is None or request_id in self.decided:
                return
            self.decided.add(request_id)
            cli = str(ROOT / ".venv" / "bin" / "approval-bot")
            argv = [cli, "approve", request_id, "--as", "checker"]
            if plan == "deny":
                argv = [cli, "deny", request_id, "--reason", self.reason(case), "--as", "checker"]
            proc = await asyncio.create_subprocess_exec(
                *argv,
                env=self.bot.env(),
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            await proc.wait()
            return


def why_section(request: Any) -> str:
    """The *Why:* section of the message the bot posts for `request` ('' without one)."""
    for block in request_message(request)["blocks"]:
        text = (block.get("text") or {}).get("text", "")
        if block.get("type") == "section" and text.startswith("*Why:*"):
            return str(text)
    return ""


@dataclass
class Outcome:
    ran: bool
    reason_seen: bool
    hook_asked: bool
    model_read: str
    seconds: float
    note: str = ""
    call_id: str | None = None
    #: The message's *Why:* section showed what the model said before its tool call.
    reason_shown: bool = False


async def run_process(
    argv: list[str], env: dict[str, str], cwd: Path, limit: float = RUN_TIMEOUT
) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), limit)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return -1, "timed out"
    return proc.returncode or 0, out.decode(errors="replace")


def setup_hooks(agent: str, argv: list[str], env: dict[str, str]) -> str:
    cli = str(ROOT / ".venv" / "bin" / "approval-bot")
    done = subprocess.run(
        [cli, "setup", agent, *argv, "--executable", cli],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout + done.stderr


def edit_json(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def our_handlers(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        h
        for groups in data.get("hooks", {}).values()
        for g in groups
        for h in g.get("hooks", [])
        if "approval-bot" in h.get("command", "") or "/hooks/claude-code" in h.get("url", "")
    ]


class Harness:
    def __init__(self, agent: str, binary: Path, work: Path) -> None:
        self.agent, self.binary, self.work = agent, binary, work
        self.bot = Bot(work)
        self.models = FakeModels()
        self.decider = Decider(self.bot)
        self.dead_url = f"http://127.0.0.1:{embedded_redis.free_port()}"
        self.counter = 0

    async def __aenter__(self) -> Harness:
        await self.models.start()
        await self.bot.start()
        self.decider.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.decider.stop()
        self.bot.stop()
        await self.models.stop()

    def base_env(self) -> dict[str, str]:
        keep = ("PATH", "LANG", "LC_ALL", "TERM", "TMPDIR", "USER", "LOGNAME", "SHELL")
        env = {k: os.environ[k] for k in keep if k in os.environ}
        env.update(APPROVALS_URL=self.bot.url, APPROVALS_TOKEN=TOKEN)
        return env

    async def run_case(
        self,
        case: str,
        argv_for: Callable[[str, Path], list[str]],
        env: dict[str, str],
        cwd: Path,
    ) -> Outcome:
        """Run the agent once for `case`; the outcome as the model and the disk saw it."""
        self.counter += 1
        tag = f"{case}-{self.counter}"
        self.decider.plans[tag] = case if case in ("approve", "deny") else None
        prompt_kind = "RUN-SURROGATE" if case == "bad_input" else "RUN"
        env = dict(env)
        if case == "bad_token":
            env["APPROVALS_TOKEN"] = UNKNOWN_API_TOKEN
        if case == "unreachable":
            env["APPROVALS_URL"] = self.dead_url
        if case == "store_outage":
            self.bot.stop_redis()
        started = time.monotonic()
        try:
            code, output = await run_process(
                argv_for(f"{prompt_kind}[{tag}]: touch ran-{tag}", cwd), env, cwd
            )
        finally:
            if case == "store_outage":
                self.bot.start_redis()
                await self.bot.wait_healthy()
        seconds = time.monotonic() - started
        read = "\n".join(self.models.results.get(tag, []))
        return Outcome(
            ran=(cwd / f"ran-{tag}").exists(),
            reason_seen=self.decider.reason(tag) in read,
            hook_asked=bool(self.decider.seen.get(tag)),
            model_read=read if read else first_line(output, 200),
            seconds=seconds,
            note=f"exit {code}",
            call_id=self.decider.call_ids.get(tag),
            reason_shown=reason_text(tag)[:60] in self.decider.why.get(tag, ""),
        )

    def workdir(self, *parts: str) -> Path:
        path = self.work.joinpath(*parts)
        path.mkdir(parents=True, exist_ok=True)
        return path
