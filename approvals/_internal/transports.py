"""How a client reaches the approvals core: `Transport` and its Redis, HTTP and threaded kinds.

Internal to approval-bot (not a stable API); agents import from `approvals`.

`RedisTransport` works on the core directly, `HttpTransport` on a remote bot's
HTTP API (long-polling), `ThreadedTransport` runs either on a private loop in
a thread; `transport_factory` picks one from the environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import io
import json
import logging
import os
import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import urlencode, urlsplit

from pydantic import ValidationError

from approvals.approval import Approval, already_decided
from approvals.errors import (
    AlreadyDecided,
    ApprovalError,
    ApprovalTimeout,
    BotUnreachable,
    InvalidRequest,
    StoreUnavailable,
    error_class,
    plain,
)
from approvals.models import ApprovalConfig, ApprovalEvent
from approvals.webhooks import Callback

if TYPE_CHECKING:  # the Redis side loads only when used: an HTTP client never needs it
    import aiohttp  # loaded by HttpTransport when it first calls (StdlibHttpTransport never)
    from redis.asyncio import Redis

    from approvals._internal.policy import Policy
    from approvals._internal.service import ApprovalService
    from approvals._internal.store.keys import Keys
    from approvals._internal.store.waiting import Waiter

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Longest single long-poll over HTTP (below common proxy idle timeouts of 60 s).
MAX_POLL_SECONDS = 55.0


class Transport(Protocol):
    """How a client reaches the approvals core: Redis directly, or the bot's HTTP API."""

    async def request(
        self,
        event: ApprovalEvent,
        config: ApprovalConfig | None,
        *,
        route: str | None,
        metadata: dict[str, Any] | None,
        callback: Callback | None = None,
    ) -> Approval: ...

    async def get(self, request_id: str) -> Approval: ...

    async def wait(self, request_id: str, timeout: float | None) -> Approval: ...  # noqa: ASYNC109

    async def cancel(self, request_id: str, *, reason: str | None = None) -> Approval: ...

    async def cancel_call(self, call_id: str, *, reason: str | None = None) -> Approval | None: ...

    async def aclose(self) -> None: ...


class _LoopBound:
    """Remembers the event loop a transport was first used on and refuses any other."""

    _loop: asyncio.AbstractEventLoop | None = None

    def _check_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise ApprovalError(
                f"this {type(self).__name__} belongs to another event loop; for sync code or "
                "several loops use SyncApprovalClient or ApprovalClient.from_env(threaded=True)"
            )


class ServiceTransport(_LoopBound):
    """Straight on the core: an `ApprovalService` and a `Waiter` that someone else runs (the
    bot's own, for `/mcp`); `RedisTransport` opens its own.

    `via`: what a cancel is recorded as coming through; `canceller`: the authenticated
    principal every request is asked by and every cancel is recorded as (None: a trusted
    in-process caller, whose requests and cancels name no one).
    """

    def __init__(
        self,
        service: ApprovalService,
        waiter: Waiter,
        *,
        via: str = "api",
        canceller: str | None = None,
    ) -> None:
        self.service = service
        self.waiter = waiter
        self.via = via
        self.canceller = canceller

    async def request(
        self,
        event: ApprovalEvent,
        config: ApprovalConfig | None,
        *,
        route: str | None,
        metadata: dict[str, Any] | None,
        callback: Callback | None = None,
    ) -> Approval:
        self._check_loop()
        submitted = await self.service.submit(
            event,
            config,
            principal=self.canceller,
            route=route,
            metadata=metadata,
            callback=callback,
        )
        return Approval.from_request(submitted)

    async def get(self, request_id: str) -> Approval:
        self._check_loop()
        return Approval.from_request(await self.service.store.get(request_id))

    async def wait(self, request_id: str, timeout: float | None) -> Approval:  # noqa: ASYNC109
        current = await self.get(request_id)
        if not current.is_pending:
            return current
        if timeout is not None and timeout <= 0:
            raise ApprovalTimeout(f"no decision on {request_id} within {timeout:g} s")
        return Approval.from_request(await self.waiter.wait(request_id, timeout))

    async def cancel(self, request_id: str, *, reason: str | None = None) -> Approval:
        self._check_loop()
        # Attributed to the authenticated principal, if any: never to a name the caller gives.
        result = await self.service.cancel(
            request_id, by=self.canceller, reason=reason, via=self.via
        )
        if result.status != "decided":
            raise already_decided(result.request)
        return Approval.from_request(result.request)

    async def cancel_call(self, call_id: str, *, reason: str | None = None) -> Approval | None:
        self._check_loop()
        result = await self.service.cancel_call(
            call_id, principal=self.canceller, by=self.canceller, reason=reason, via=self.via
        )
        return None if result is None else Approval.from_request(result.request)

    async def aclose(self) -> None:
        return None  # the service and the waiter belong to whoever made them


class RedisTransport(ServiceTransport):
    """Straight on the core: `ApprovalService` + `Waiter` over one Redis client."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        *,
        policy: Policy | None = None,
        owns_redis: bool = True,
    ) -> None:
        from approvals._internal.service import ApprovalService
        from approvals._internal.store.store import ApprovalStore
        from approvals._internal.store.waiting import Waiter

        service = ApprovalService(ApprovalStore(redis, keys), policy)
        super().__init__(service, Waiter(redis, keys, store=service.store))
        self.redis = redis
        self._owns_redis = owns_redis

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = "approvals", policy: Policy | None = None
    ) -> RedisTransport:
        from approvals._internal.store.connection import connect
        from approvals._internal.store.keys import Keys

        return cls(connect(url, client_name="approval-client"), Keys(prefix), policy=policy)

    async def aclose(self) -> None:
        await self.waiter.stop()
        if self._owns_redis:
            await self.redis.aclose()


def error_from_response(status: int, body: Any, fallback: str) -> ApprovalError:
    """The `ApprovalError` matching an HTTP error answer `{"error": {"code", "message"}}`."""
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        code, message = str(err.get("code", "")), str(err.get("message") or fallback)
    else:
        code, message = "", fallback
    cls = error_class(code, status)
    if code == "api_disabled":  # a configuration problem, not a blip worth retrying
        cls = ApprovalError
    if cls is AlreadyDecided:
        return AlreadyDecided(message)
    return cls(message, details=err)


class HttpTransport(_LoopBound):
    """To a remote bot's HTTP API with a bearer token; waits by long-polling `?wait=`."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        poll_seconds: float = MAX_POLL_SECONDS,
        request_timeout: float = 30.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._json_headers = {**self._headers, "Content-Type": "application/json"}
        self.poll_seconds = min(poll_seconds, MAX_POLL_SECONDS)
        self.request_timeout = request_timeout
        self._session = session
        self._owns_session = session is None

    def __repr__(self) -> str:  # never show the token
        return f"HttpTransport({self.url!r})"

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, Any]:
        import aiohttp

        self._check_loop()
        if self._session is None:
            self._session = aiohttp.ClientSession()
        url = self.url + path
        limit = aiohttp.ClientTimeout(total=timeout or self.request_timeout)
        try:
            # The body as a file: events may be megabytes (aiohttp warns about large raw bodies).
            payload = None if body is None else io.BytesIO(json.dumps(body).encode())
            headers = self._headers if body is None else self._json_headers
            async with self._session.request(
                method,
                url,
                data=payload,
                params=params,
                headers=headers,
                timeout=limit,
            ) as response:
                text = await response.text()
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as e:
            raise BotUnreachable(f"approval bot at {self.url} is unreachable: {plain(e)}") from e
        return self._answer(method, url, status, text)

    @staticmethod
    def _answer(method: str, url: str, status: int, text: str) -> dict[str, Any]:
        """The JSON object of a 2xx answer; the matching `ApprovalError` for anything else."""
        try:
            data: Any = json.loads(text) if text else None
        except ValueError:
            data = None
        if status >= 400:
            fallback = f"HTTP {status} from {method} {url}: {text[:200]}"
            raise error_from_response(status, data, fallback)
        if not isinstance(data, dict):
            raise ApprovalError(f"unexpected answer from {method} {url}: {text[:200]!r}")
        return data

    @staticmethod
    def _approval(data: dict[str, Any]) -> Approval:
        try:
            return Approval.model_validate(data)
        except ValidationError as e:
            raise ApprovalError(f"the approval bot sent an invalid approval object: {e}") from e

    async def request(
        self,
        event: ApprovalEvent,
        config: ApprovalConfig | None,
        *,
        route: str | None,
        metadata: dict[str, Any] | None,
        callback: Callback | None = None,
    ) -> Approval:
        body = request_body(event, config, route=route, metadata=metadata, callback=callback)
        return self._approval(await self._call("POST", "/v1/approvals", body=body))

    async def get(self, request_id: str) -> Approval:
        return self._approval(await self._call("GET", f"/v1/approvals/{request_id}"))

    async def wait(self, request_id: str, timeout: float | None) -> Approval:  # noqa: ASYNC109
        loop = asyncio.get_running_loop()
        end = None if timeout is None else loop.time() + timeout
        backoff = 0.2
        while True:
            remaining = None if end is None else end - loop.time()
            poll = self.poll_seconds if remaining is None else min(remaining, self.poll_seconds)
            try:
                current = self._approval(
                    await self._call(
                        "GET",
                        f"/v1/approvals/{request_id}",
                        params={"wait": f"{max(poll, 0.0):.3f}"},
                        timeout=max(poll, 0) + 30.0,
                    )
                )
            except StoreUnavailable as e:  # a restart or a blip: keep polling until the end
                if remaining is not None and remaining <= backoff:
                    raise ApprovalTimeout(f"no decision on {request_id}: {e.message}") from e
                log.warning(
                    "long-poll failed id=%s error=%s retry_in=%.1fs", request_id, e.message, backoff
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            backoff = 0.2
            if not current.is_pending:
                return current
            if end is not None and loop.time() >= end:
                raise ApprovalTimeout(f"no decision on {request_id} within {timeout:g} s")

    async def cancel(self, request_id: str, *, reason: str | None = None) -> Approval:
        # No `by`: the bot attributes a cancel to the token's principal.
        body = {"reason": reason} if reason else None
        return self._approval(
            await self._call("POST", f"/v1/approvals/{request_id}/cancel", body=body)
        )

    async def cancel_call(self, call_id: str, *, reason: str | None = None) -> Approval | None:
        # The token's principal: a call id only ever finds that principal's own request.
        body: dict[str, Any] = {"call_id": call_id}
        if reason:
            body["reason"] = reason
        found = await self._call("POST", "/v1/calls/cancel", body=body)
        return self._approval(found["approval"]) if found.get("approval") else None

    async def aclose(self) -> None:
        if self._session is not None and self._owns_session:
            await self._session.close()
        self._session = None


class StdlibHttpTransport(HttpTransport):
    """`HttpTransport` on the standard library's `http.client`, each call on a daemon thread
    of its own (one connection per call): it never imports aiohttp. For the command hook,
    a process per gated tool call that makes one to three calls, where importing aiohttp
    would be most of its start-up. Same answers and errors as `HttpTransport`; a call given
    up (cancelled, timed out) leaves its thread to end on its socket timeout."""

    def __init__(self, url: str, token: str, **kwargs: Any) -> None:
        super().__init__(url, token, **kwargs)
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
            raise InvalidRequest("APPROVALS_URL must be an http(s) URL such as http://bot:3000")
        self._parts = parts
        self._where = f"{parts.hostname}:{parts.port or _DEFAULT_PORTS[parts.scheme]}"

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, Any]:
        self._check_loop()
        target = self._parts.path + path + (f"?{urlencode(params)}" if params else "")
        payload = None if body is None else json.dumps(body).encode()
        headers = self._headers if body is None else self._json_headers
        limit = timeout or self.request_timeout
        try:
            status, text = await _on_thread(
                lambda: self._fetch(method, target, payload, headers, limit)
            )
        except (OSError, http.client.HTTPException) as e:  # TimeoutError is an OSError
            raise BotUnreachable(
                f"approval bot at {self.url} is unreachable: {plain(e, self._where)}"
            ) from e
        return self._answer(method, self.url + path, status, text)

    def _fetch(
        self, method: str, target: str, payload: bytes | None, headers: dict[str, str], limit: float
    ) -> tuple[int, str]:
        connection: http.client.HTTPConnection
        if self._parts.scheme == "https":
            connection = http.client.HTTPSConnection(self._parts.netloc, timeout=limit)
        else:
            connection = http.client.HTTPConnection(self._parts.netloc, timeout=limit)
        try:
            connection.request(method, target, body=payload, headers=headers)
            response = connection.getresponse()
            return response.status, response.read().decode("utf-8", "replace")
        finally:
            connection.close()

    async def aclose(self) -> None:
        return None  # no session: every call had its own connection


_DEFAULT_PORTS = {"http": 80, "https": 443}


async def _on_thread(work: Callable[[], T]) -> T:
    """`work()` on a daemon thread of its own (never joined: an abandoned call cannot hold up
    the end of the process, as the default executor's threads would)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if done.done():
            return  # given up on meanwhile
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            result, error = work(), None
        except BaseException as e:
            result, error = None, e
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="approvals-http", daemon=True).start()
    return await done


def request_body(
    event: ApprovalEvent,
    config: ApprovalConfig | None,
    *,
    route: str | None,
    metadata: dict[str, Any] | None,
    callback: Callback | None = None,
) -> dict[str, Any]:
    """The `POST /v1/approvals` body for an event and its review config."""
    config = config or ApprovalConfig()
    body: dict[str, Any] = {
        "tool_name": event.tool_name,
        "arguments": event.arguments,
        "kind": config.kind,
        "sensitivity": config.sensitivity,
        "prompt": config.prompt,
        "options": list(config.options) if config.options else None,
        "deadline_seconds": config.deadline_seconds,
        "call_id": event.call_id,
        "session_id": event.session_id,
        "agent": event.agent,
        "route": route,
        "metadata": metadata or None,
        "event_kind": event.kind,
        "command": event.command,
        "path": event.path,
        "cwd": event.cwd,
        "permissions": event.permissions,
        "arguments_schema": event.arguments_schema,
        "callback": callback.model_dump(mode="json") if callback else None,
        "reason": event.context.reason if event.context else None,
    }
    if config.allow_for_session:
        body["allow_for_session"] = True
    return {k: v for k, v in body.items() if v is not None}


class ThreadedTransport:
    """Runs another transport on a private event loop in a daemon thread; usable from any loop
    (and, through `run`, from sync code)."""

    def __init__(self, factory: Callable[[], Transport]) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="approvals-client", daemon=True
        )
        self._thread.start()
        self._closed = False

        async def build() -> Transport:
            return factory()

        try:
            self.inner: Transport = self.run(build())
        except BaseException:
            self._stop()
            raise

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the private loop and block until it ends (sync callers)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _on_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:  # pragma: no cover - always called from a coroutine
            here = None
        if here is self._loop:
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def request(
        self,
        event: ApprovalEvent,
        config: ApprovalConfig | None,
        *,
        route: str | None,
        metadata: dict[str, Any] | None,
        callback: Callback | None = None,
    ) -> Approval:
        return await self._on_loop(
            self.inner.request(event, config, route=route, metadata=metadata, callback=callback)
        )

    async def get(self, request_id: str) -> Approval:
        return await self._on_loop(self.inner.get(request_id))

    async def wait(self, request_id: str, timeout: float | None) -> Approval:  # noqa: ASYNC109
        return await self._on_loop(self.inner.wait(request_id, timeout))

    async def cancel(self, request_id: str, *, reason: str | None = None) -> Approval:
        return await self._on_loop(self.inner.cancel(request_id, reason=reason))

    async def cancel_call(self, call_id: str, *, reason: str | None = None) -> Approval | None:
        return await self._on_loop(self.inner.cancel_call(call_id, reason=reason))

    async def aclose(self) -> None:
        if self._closed:
            return
        await self._on_loop(self.inner.aclose())
        self._stop()

    def close(self) -> None:
        """Close the inner transport and end the thread (sync callers)."""
        if self._closed:
            return
        self.run(self.inner.aclose())
        self._stop()

    def _stop(self) -> None:
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()


TransportFactory = Callable[[], Transport]


def choose_transport(
    url: str | None,
    token: str | None,
    redis_setup: Callable[[], TransportFactory] | None,
) -> TransportFactory:
    """The one rule for choosing a transport (`ApprovalClient.from_env`, the CLI): a bot URL,
    with its token, → that bot's HTTP API; else Redis directly when `redis_setup` is given
    (called only then, at once, it checks its configuration and returns the factory);
    neither → `ApprovalError` naming both."""
    if url:
        if not url.startswith(("http://", "https://")):
            raise InvalidRequest("APPROVALS_URL must be an http(s) URL such as http://bot:3000")
        if not token:
            raise InvalidRequest(
                "APPROVALS_TOKEN is required with APPROVALS_URL (one of the bot's "
                "APPROVALS_API_TOKENS)"
            )
        return lambda: HttpTransport(url, token)
    if redis_setup is not None:
        return redis_setup()
    raise ApprovalError(
        "no approval backend configured: set APPROVALS_URL (with APPROVALS_TOKEN) to use a "
        "running bot's HTTP API, or REDIS_URL (with APPROVALS_PREFIX) to use its Redis directly"
    )


def transport_factory(env: Mapping[str, str] | None = None) -> TransportFactory:
    """A factory for the transport the environment names; see `ApprovalClient.from_env`."""
    source: Mapping[str, str] = os.environ if env is None else env

    def get(name: str) -> str | None:
        return (source.get(name) or "").strip() or None

    def redis_setup(redis_url: str) -> TransportFactory:
        from approvals._internal.policy_file import build_policy

        prefix = get("APPROVALS_PREFIX") or "approvals"
        reviewers = tuple(
            r.strip() for r in (get("APPROVALS_REVIEWERS") or "").split(",") if r.strip()
        )
        policy = build_policy(
            get("APPROVALS_POLICY_FILE"), get("APPROVALS_DEFAULT_CHANNEL"), reviewers
        )
        return lambda: RedisTransport.from_url(redis_url, prefix=prefix, policy=policy)

    redis_url = get("REDIS_URL")
    return choose_transport(
        get("APPROVALS_URL"),
        get("APPROVALS_TOKEN"),
        (lambda: redis_setup(redis_url)) if redis_url else None,
    )


__all__ = [
    "HttpTransport",
    "RedisTransport",
    "ServiceTransport",
    "StdlibHttpTransport",
    "ThreadedTransport",
    "Transport",
    "TransportFactory",
    "choose_transport",
    "error_from_response",
    "request_body",
    "transport_factory",
]
