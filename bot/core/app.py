"""Composing and running the bot: Redis, the aiohttp app (Slack, API, health), dispatcher, sweeper.

`Bot` holds every running part of one process and starts/stops them in
order; `serve(settings)` is what `approval-bot serve` runs. Any number of
replicas may run against one Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import signal
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from redis.exceptions import TimeoutError as RedisTimeoutError
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp

from approvals._internal.policy import Policy
from approvals._internal.policy_file import PolicyError, build_policy
from approvals._internal.service import ApprovalService
from approvals._internal.store.connection import (
    DEFAULT_COMMAND_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    cancel_and_wait,
    connect,
)
from approvals._internal.store.keys import Keys
from approvals._internal.store.store import ApprovalStore
from approvals._internal.store.waiting import Waiter
from bot.core.context import BotContext
from bot.core.shutdown import Drained, unless_draining
from bot.http import api, dev_token
from bot.http.connections import (
    CONNECTION_GUARD,
    ConnectionGuard,
    GuardedSite,
    HttpLimits,
    body_deadline,
    trust,
)
from bot.http.principals import Principals
from bot.masking.masker import outbound
from bot.ops import embedded_redis, redis_location
from bot.ops.metrics import CONTENT_TYPE, METRICS
from bot.slack import link as slack_link
from bot.slack import listeners
from bot.slack.bolt_requests import SlackSignature, to_bolt_request
from bot.slack.client import MaskingWebClient
from bot.slack.delivery.dispatcher import Dispatcher, DispatcherOptions
from bot.slack.delivery.reminders import Reminders
from bot.slack.directory import Directory
from bot.slack.home import HomePublisher
from bot.workers.sweeper import Sweeper
from bot.workers.webhooks import WebhookOptions, WebhookWorker

log = logging.getLogger(__name__)

#: Connections the kernel queues before the bot accepts them (aiohttp's default is 128: a burst
#: of agents past it waits for a SYN retry, a second or more). Capped by net.core.somaxconn.
LISTEN_BACKLOG = 4096

#: Longest a store operation waits for its turn (`ApprovalStore(max_concurrent=…)`) before it
#: fails as `StoreUnavailable` (API 503, hooks deny): a burst of thousands queues behind the
#: pool for seconds; a frozen Redis fails each turn after the command timeout.
ADMISSION_TIMEOUT = 30.0

#: Longest one part may take to stop (a frozen Redis must not hold up shutdown).
STOP_STEP_SECONDS = 5.0


@dataclass
class BotConfig:
    """Plain values for one bot process (start-up code builds this from `Settings`)."""

    redis_url: str
    prefix: str = "approvals"
    #: Any other than loopback needs API tokens (`Bot.start` refuses it without).
    host: str = dev_token.LOOPBACK
    port: int = 3000
    # Secrets stay out of the repr (a logged or printed config must not show them).
    slack_bot_token: str | None = field(default=None, repr=False)
    slack_signing_secret: str | None = field(default=None, repr=False)
    slack_app_token: str | None = field(default=None, repr=False)
    slack_api_url: str = "https://slack.com/api/"
    api_tokens: tuple[str, ...] = field(default=(), repr=False)
    admin_tokens: tuple[str, ...] = field(default=(), repr=False)
    default_channel: str | None = None
    reviewers: tuple[str, ...] = ()
    policy_file: Path | None = None
    consumer: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    dispatcher: DispatcherOptions = field(default_factory=DispatcherOptions)
    sweep_interval: float = 1.0
    #: Seconds a store operation may wait for Redis before it fails (API 503, hooks deny).
    redis_timeout: float = DEFAULT_COMMAND_TIMEOUT
    webhooks: WebhookOptions = field(default_factory=WebhookOptions)
    #: Seconds a Slack Web API call may take before the client gives up on it.
    slack_timeout: float = 30.0
    #: Seconds a SIGTERM waits for work in hand before stopping (`bot/core/shutdown.py`).
    shutdown_grace: float = 10.0
    #: The HTTP server's read timeouts and connection cap (`bot/http/connections.py`).
    http: HttpLimits = field(default_factory=HttpLimits)

    @property
    def slack_enabled(self) -> bool:
        return bool(self.slack_bot_token)


def policy_for(config: BotConfig) -> Policy:
    """The policy file if one is configured, else ask everything on the default route."""
    return build_policy(config.policy_file, config.default_channel, config.reviewers)


class StartError(Exception):
    """`serve` cannot start for a reason the operator fixes (exit 2, one line: `message`)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Bot:
    """One bot process: start() brings every part up, stop() takes it down in reverse."""

    def __init__(self, config: BotConfig, policy: Policy | None = None) -> None:
        self.config = config
        self.policy = policy or policy_for(config)
        self.ctx: BotContext | None = None
        self.bolt: AsyncApp | None = None
        self.listeners: listeners.Listeners | None = None
        self.web: web.Application | None = None
        self.runner: web.AppRunner | None = None
        self.guard: ConnectionGuard | None = None
        self.dispatcher: Dispatcher | None = None
        self.home: HomePublisher | None = None
        self.reminders: Reminders | None = None
        self.sweeper: Sweeper | None = None
        self.webhooks: WebhookWorker | None = None
        self.socket_handler: Any = None
        self.slack_link: slack_link.SlackLink | None = None
        self.port: int | None = None
        self._waiter_redis: Any = None
        self._http: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        cfg = self.config
        redis = connect(cfg.redis_url, client_name=f"approval-bot:{cfg.consumer}")
        waiter_redis = connect(
            cfg.redis_url, max_connections=2, client_name=f"approval-bot-waiter:{cfg.consumer}"
        )
        keys = Keys(cfg.prefix)
        store = ApprovalStore(
            redis,
            keys,
            command_timeout=cfg.redis_timeout,
            # As many at once as the pool has connections: no operation waits for one
            # inside its command timeout; the rest take turns, in order.
            max_concurrent=_pool_size(redis),
            admission_timeout=ADMISSION_TIMEOUT,
        )
        slack = None
        if cfg.slack_enabled:
            # One shared session: without it slack_sdk opens a connection per call.
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=cfg.slack_timeout)
            )
            slack = MaskingWebClient(
                token=cfg.slack_bot_token,
                base_url=cfg.slack_api_url,
                session=self._http,
                timeout=int(max(1, cfg.slack_timeout)),
            )
        directory = Directory(slack, redis, keys)
        service = ApprovalService(store, self.policy, membership=directory.members)
        waiter = Waiter(waiter_redis, keys)
        # A decision made here (a click, the sweeper, a cancel) wakes this process's waiters
        # from the compare-and-set's own result: no pub/sub hop, no re-read.
        store.on_decided(waiter.deliver)
        await waiter.start()
        self.ctx = BotContext(
            redis=redis,
            keys=keys,
            store=store,
            service=service,
            waiter=waiter,
            api_tokens=cfg.api_tokens,
            admin_tokens=cfg.admin_tokens,
            slack=slack,
        )
        self.ctx.metrics.configure(
            routes=self.policy.routes, principals=Principals(cfg.api_tokens, cfg.admin_tokens).names
        )
        self._waiter_redis = waiter_redis
        if slack is not None:
            _drop_token_unused_warning()
            self.bolt = AsyncApp(
                client=slack,
                signing_secret=cfg.slack_signing_secret or "socket-mode-unused",
                request_verification_enabled=not cfg.slack_app_token,
                process_before_response=False,
            )
            self.listeners = listeners.register(self.bolt, self.ctx)
        # In Socket Mode, interactions arrive over the socket: the HTTP endpoint (which then
        # has no signing secret to check) must not accept any.
        if not cfg.api_tokens and not cfg.admin_tokens and not dev_token.is_loopback(cfg.host):
            raise StartError(
                f"refusing to listen on {cfg.host} without API tokens: set APPROVALS_API_TOKENS "
                "(without it, serve listens on 127.0.0.1 with a development token)"
            )
        self.web = build_web_app(
            self.ctx,
            None if cfg.slack_app_token else self.bolt,
            cfg.http,
            cfg.slack_signing_secret,
        )
        self.runner = web.AppRunner(self.web, **cfg.http.server_options())
        await self.runner.setup()
        self.guard = self.web[CONNECTION_GUARD]
        site = GuardedSite(self.runner, cfg.host, cfg.port, self.guard, backlog=LISTEN_BACKLOG)
        try:
            await site.start()
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise StartError(
                    f"port {cfg.port} is already in use (another approval-bot serve, or "
                    "another program): stop that, or set PORT to a free port"
                ) from e
            raise StartError(
                f"cannot listen on {cfg.host}:{cfg.port}: {e.strerror or e}; set PORT"
            ) from e
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else cfg.port
        self.sweeper = Sweeper(service, cfg.sweep_interval)
        await self.sweeper.start()
        self.webhooks = WebhookWorker(self.ctx, cfg.consumer, cfg.webhooks)
        await self.webhooks.start()
        if slack is not None:
            self.home = HomePublisher(self.ctx)
            self.ctx.home = self.home
            await self.home.start()
            self.reminders = Reminders(self.ctx, max(1.0, cfg.sweep_interval))
            self.ctx.reminders = self.reminders
            await self.reminders.start()
            self.dispatcher = Dispatcher(self.ctx, cfg.consumer, cfg.dispatcher)
            self.reminders.use(self.dispatcher.slack)  # one pacing and update budget
            await self.dispatcher.start()
        if slack is not None:
            if cfg.slack_app_token and self.bolt is not None:
                from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

                self.socket_handler = AsyncSocketModeHandler(
                    self.bolt, cfg.slack_app_token, logger=slack_link.socket_mode_logger()
                )
            # auth.test and the socket in the background: the HTTP API and /healthz
            # ("connecting") serve meanwhile, and a signal stops the bot in any phase.
            self.slack_link = slack_link.SlackLink(slack, self.socket_handler)
            self.ctx.slack_link = self.slack_link
            self.slack_link.start()
        mode = ("socket mode" if cfg.slack_app_token else "http mode") if slack else "no slack"
        log.info(
            "bot started port=%s mode=%s prefix=%s consumer=%s",
            self.port,
            mode,
            cfg.prefix,
            cfg.consumer,
        )

    async def drain(self, grace: float | None = None) -> None:
        """Shut down gracefully (`bot/core/shutdown.py`): refuse new work, answer parked calls,
        let the dispatcher finish and ack what it holds, all within `grace` seconds."""
        grace = self.config.shutdown_grace if grace is None else grace
        if self.ctx is None:
            return
        loop = asyncio.get_running_loop()
        end = loop.time() + grace
        log.info("shutting down: draining for up to %.0fs", grace)
        self.ctx.draining.set()  # clicks are still taken: they record, they start nothing
        self.ctx.waiter.interrupt(Drained)  # parked long-polls answer 503 `shutting_down` now
        if self.dispatcher is not None:
            await self.dispatcher.drain(max(0.0, end - loop.time()))
        # Let parked handlers write their answers before the server closes.
        await asyncio.sleep(0)

    async def stop(self) -> None:
        # Each step is bounded: with Redis frozen, a part's last command (leaving the consumer
        # group, unsubscribing) would otherwise wait for ever.
        if self.guard is not None:
            self.guard.close()
        steps: list[tuple[str, Any]] = []
        for name, part in (
            ("slack link", self.slack_link),  # also closes the socket
            ("dispatcher", self.dispatcher),
            ("home", self.home),
            ("reminders", self.reminders),
            ("sweeper", self.sweeper),
            ("webhooks", self.webhooks),
        ):
            if part is not None:
                steps.append((name, part.stop))
        if self.runner is not None:
            steps.append(("http", self.runner.cleanup))
        if self.listeners is not None:
            # After the socket and the HTTP server: no click comes in any more; before Redis
            # and the Slack client close: the clicks already taken finish.
            steps.append(("slack listeners", self.listeners.finish))
        if self.ctx is not None:
            steps += [("waiter", self.ctx.waiter.stop), ("redis", self.ctx.redis.aclose)]
        if self._waiter_redis is not None:
            steps.append(("waiter redis", self._waiter_redis.aclose))
        if self._http is not None:
            steps.append(("slack http", self._http.close))
        for name, step in steps:
            try:
                async with asyncio.timeout(STOP_STEP_SECONDS):
                    await step()
            except TimeoutError:
                log.warning("stop step timed out step=%s after=%ss", name, STOP_STEP_SECONDS)
            except Exception as e:
                log.warning("stop step failed step=%s error=%r", name, e)
        log.info("bot stopped")

    def reload_policy(self) -> bool:
        """Re-read the policy file; a bad file keeps the old policy and logs why."""
        try:
            policy = policy_for(self.config)
        except PolicyError as e:
            log.error("policy reload failed; keeping the old policy\n%s", e.message)
            return False
        self.policy = policy
        if self.ctx is not None:
            self.ctx.service.policy = policy
            self.ctx.metrics.route.known = {*policy.routes, "default"}
        log.info("policy reloaded rules=%d routes=%d", len(policy.rules), len(policy.routes))
        return True


def _pool_size(redis: Any) -> int:
    """The client's connection bound (a cluster client has one pool per node: the default)."""
    pool = getattr(redis, "connection_pool", None)
    return int(getattr(pool, "max_connections", None) or DEFAULT_MAX_CONNECTIONS)


def _drop_token_unused_warning() -> None:
    """bolt reads SLACK_BOT_TOKEN from the environment on its own and, as we pass the client
    built from the same token, warns on every start that the token "will be unused"."""
    from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped

    unused = warning_client_prioritized_and_token_skipped()
    bolt_logger = logging.getLogger("slack_bolt.AsyncApp")
    if not any(getattr(f, "drops", None) == unused for f in bolt_logger.filters):
        drop = _DropMessage(unused)
        bolt_logger.addFilter(drop)


class _DropMessage(logging.Filter):
    def __init__(self, message: str) -> None:
        super().__init__()
        self.drops = message

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != self.drops


def build_web_app(
    ctx: BotContext,
    bolt: AsyncApp | None,
    limits: HttpLimits | None = None,
    signing_secret: str | None = None,
) -> web.Application:
    """The aiohttp app: /slack/events (Slack's signature checked with `signing_secret`, then
    bolt), the agent API, /healthz and /metrics; with its `ConnectionGuard`
    (`CONNECTION_GUARD`) for the site `Bot.start` opens."""
    limits = limits or HttpLimits()
    signature = SlackSignature(signing_secret)
    app = web.Application(
        # The body deadline outside: inside, it would hide the long-poll handler's mark from
        # `error_middleware` (and add a frame to every parked long-poll).
        middlewares=[body_deadline(limits.body_timeout), api.error_middleware],
        client_max_size=ctx.max_body_bytes,
    )

    async def slack_events(request: web.Request) -> web.Response:
        if bolt is None:
            message = (
                "Slack interactions arrive over Socket Mode (SLACK_APP_TOKEN is set), not here"
                if ctx.slack is not None
                else "Slack is not configured: set SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET"
            )
            return web.json_response(
                {"error": {"code": "slack_not_configured", "message": message}}, status=503
            )
        raw = await request.read()
        why = signature.check(
            raw,
            request.headers.get("X-Slack-Request-Timestamp"),
            request.headers.get("X-Slack-Signature"),
        )
        if why is not None:
            # One line, never the body (bolt would log all of it, at INFO, for each).
            log.info("slack request refused: %s (%d bytes)", why, len(raw))
            return web.json_response({"error": "invalid request"}, status=401)
        trust(request)
        try:
            bolt_request = await to_bolt_request(request, raw.decode("utf-8"))
        except ValueError as e:  # signed, yet not what Slack sends
            log.warning("slack request unreadable: %s", type(e).__name__)
            return web.json_response({"error": "unreadable request"}, status=400)
        response = await bolt.async_dispatch(bolt_request)
        if response.body and response.body.lstrip().startswith("{"):
            # An ack() with a payload (modal errors, a view) is a way to Slack too.
            with contextlib.suppress(ValueError):
                response.body = json.dumps(outbound(json.loads(response.body)))
        return await to_aiohttp_response(response)

    async def healthz(request: web.Request) -> web.Response:
        why = None
        try:
            redis_ok = bool(await asyncio.wait_for(ctx.redis.ping(), 2))
        except (TimeoutError, RedisTimeoutError):
            redis_ok, why = False, "Redis did not answer PING within 2 s (frozen or partitioned)"
        except Exception as e:
            redis_ok, why = False, f"Redis is unreachable ({type(e).__name__})"
        if not redis_ok:
            ctx.metrics.redis_errors.labels(component="healthz").inc()
        if ctx.slack_link is not None:
            slack = ctx.slack_link.state  # connecting | ok | error: …
        else:
            slack = "connecting" if ctx.slack is not None else "not configured"
        draining = ctx.draining.is_set()
        ok = redis_ok and not slack.startswith("error") and not draining
        body: dict[str, Any] = {
            "ok": ok,
            "redis": redis_ok,
            "slack": slack,
            "waiting": ctx.waiter.waiting,
        }
        if draining:
            body["draining"], why = True, "shutting down: send new calls to another replica"
        if why:
            body["reason"] = why
        return web.json_response(body, status=200 if ok else 503)

    async def metrics(request: web.Request) -> web.Response:
        body = await ctx.metrics.scrape(ctx.redis, ctx.keys, waiting=ctx.waiter.waiting)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    app[METRICS] = ctx.metrics
    app.router.add_post("/slack/events", slack_events)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    handlers = api.add_routes(app, ctx)
    app[CONNECTION_GUARD] = ConnectionGuard(limits, parked=lambda: handlers.parking.parked)
    from bot.mcp.http import add_routes as add_mcp_routes  # the MCP SDK loads only for serve

    add_mcp_routes(app, ctx, handlers.authorize, lambda h: handlers.principals.authenticate(h))
    return app


async def serve(
    settings: Any,
    stop: asyncio.Event | None = None,
    *,
    started: Callable[[], None] | None = None,
) -> None:
    """`approval-bot serve`: run until SIGINT/SIGTERM (or `stop` is set); SIGHUP reloads
    the policy file; `started()` is called once the bot serves (the CLI tunes the GC then).
    With no REDIS_URL it uses the embedded Redis of
    APPROVALS_DATA_DIR (`bot.ops.embedded_redis.open_shared`: started here, or shared with the
    serve that runs it, and taken over if that one ends).

    SIGINT and SIGTERM set `stop` from the very start, so they end every phase: the embedded
    server's start (up to 10 s) is awaited, and cancelled by a signal, not run blocking."""
    stop = stop or asyncio.Event()
    with stop_on_signals(stop):
        embedded = None
        redis_url = settings.redis_url
        if redis_url is not None:
            log.info("redis %s (REDIS_URL), not embedded", redis_location.describe(redis_url))
        else:
            # Started on this (the loop's) thread: the server dies with the thread that
            # started it. A Redis on localhost:6379 is not used unless REDIS_URL names it.
            directory = redis_location.server_dir(settings.approvals_data_dir)
            try:
                embedded = await unless_draining(stop, embedded_redis.open_shared_async(directory))
            except Drained:
                log.info("stopped while starting the embedded Redis in %s", directory)
                return
            redis_url = embedded.url
            if embedded.owner:
                log.warning(
                    "redis %s, embedded: REDIS_URL is not set, so this serve started one with "
                    "its data in %s (append-only file on)",
                    redis_location.describe(redis_url),
                    embedded.data_dir,
                )
            else:
                log.warning(
                    "redis %s, embedded: shared with the serve (pid %s) that runs it for %s",
                    redis_location.describe(redis_url),
                    embedded_redis.lock_holder(embedded.data_dir) or "?",
                    embedded.data_dir,
                )
            hint = redis_location.localhost_hint()
            if hint:
                log.warning("%s; before 0.2.0 serve used it", hint)
        keeper = (
            asyncio.create_task(_keep_embedded(embedded))
            if embedded is not None and not embedded.owner
            else None
        )
        try:
            await _serve(settings, redis_url, stop, started)
        finally:
            if keeper is not None:
                await cancel_and_wait([keeper])
            if embedded is not None:
                embedded.close()


@contextlib.contextmanager
def stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set `stop` while in the block (only where the loop can handle
    signals: the main thread of a Unix process; elsewhere the caller sets `stop`)."""
    loop = asyncio.get_running_loop()
    handled: list[signal.Signals] = []
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
            handled.append(sig)
    try:
        yield
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)


async def _keep_embedded(embedded: embedded_redis.SharedServer, every: float = 1.0) -> None:
    """A serve using another's embedded server takes it over when that serve ends. Runs on
    the loop's thread on purpose: the server dies with the thread that started it."""
    while not embedded.owner:
        await asyncio.sleep(every)
        if await embedded.take_over_async():
            log.warning(
                "the serve that ran the embedded Redis for %s ended: this one runs it now on %s",
                embedded.data_dir,
                redis_location.describe(embedded.url),
            )


def serve_config(settings: Any, redis_url: str) -> tuple[BotConfig, str | None]:
    """The bot's plain values from the settings, and the development token when no API token
    is set: then it listens on loopback only and accepts that token (`bot.http.dev_token`);
    with tokens, on every interface."""

    def secret(value: Any) -> str | None:
        return value.get_secret_value() if value is not None else None

    api_tokens = tuple(t.get_secret_value() for t in settings.approvals_api_tokens)
    admin_tokens = tuple(t.get_secret_value() for t in settings.approvals_admin_tokens)
    dev = None
    if not api_tokens and not admin_tokens:
        dev = dev_token.load_or_create(settings.approvals_data_dir)
        api_tokens = (f"{dev_token.PRINCIPAL}:{dev}",)
    config = BotConfig(
        redis_url=redis_url,
        prefix=settings.approvals_prefix,
        host=dev_token.LOOPBACK if dev is not None else "0.0.0.0",
        port=settings.port,
        slack_bot_token=secret(settings.slack_bot_token),
        slack_signing_secret=secret(settings.slack_signing_secret),
        slack_app_token=secret(settings.slack_app_token),
        slack_api_url=settings.slack_api_url,
        api_tokens=api_tokens,
        admin_tokens=admin_tokens,
        default_channel=settings.approvals_default_channel,
        reviewers=tuple(settings.approvals_reviewers),
        policy_file=settings.approvals_policy_file,
        dispatcher=DispatcherOptions(pacing=settings.approvals_slack_pacing),
        shutdown_grace=settings.approvals_shutdown_grace,
    )
    return config, dev


async def _serve(
    settings: Any, redis_url: str, stop: asyncio.Event, started: Callable[[], None] | None
) -> None:
    config, dev = serve_config(settings, redis_url)
    if not config.slack_enabled:
        log.warning(
            "Slack is not configured: requests are stored but not posted. Set "
            "SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET (or SLACK_APP_TOKEN for Socket "
            "Mode) — see README 'Slack app setup'. Decide meanwhile with "
            "`approval-bot pending` / `approval-bot approve ID`."
        )
    if dev is not None:
        log.warning(
            "APPROVALS_API_TOKENS is not set: listening on %s only, with the development token "
            "kept in %s (set APPROVALS_API_TOKENS to listen on every interface)",
            dev_token.LOOPBACK,
            dev_token.path(settings.approvals_data_dir),
        )
    bot = Bot(config)
    loop = asyncio.get_running_loop()
    reloads = False
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not main thread
        loop.add_signal_handler(signal.SIGHUP, bot.reload_policy)
        reloads = True
    try:
        if not await wait_for_redis(config.redis_url, stop):
            return  # told to stop while Redis was still away
        await bot.start()
        if dev is not None:  # the one line to paste in another shell (stdout, not the log)
            print(dev_token.export_line(bot.port or config.port, dev), flush=True)
        if started is not None:
            started()
        await stop.wait()
        await bot.drain()
    finally:
        if reloads:
            loop.remove_signal_handler(signal.SIGHUP)
        await bot.stop()


async def wait_for_redis(
    url: str, stop: asyncio.Event, *, first_pause: float = 1.0, max_pause: float = 30.0
) -> bool:
    """Until Redis answers: one log line per failed attempt (no traceback), pauses growing
    from `first_pause` to `max_pause`. False when `stop` is set first (a signal)."""
    from redis.asyncio import Redis

    where = redis_location.describe(url)
    pause, tries = first_pause, 1
    while not stop.is_set():
        client = Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3)
        try:
            await client.ping()
            if tries > 1:
                log.info("redis %s answers now", where)
            return True
        except Exception as e:
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            log.warning(
                "redis %s unreachable (attempt %d): %s; retrying in %g s (SIGTERM stops)",
                where,
                tries,
                reason.replace(url, where),
                pause,
            )
        finally:
            with contextlib.suppress(Exception):
                await client.aclose()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), pause)
        pause, tries = min(pause * 2, max_pause), tries + 1
    return False
