"""`require_approval`: gate a sync or async function behind a reviewer's decision.

The handler (a sync/async callable `GateRequest -> Decision`, or a review plugin) sees
the canonical parsed arguments. Approve → the function runs, the `Decision`
available from `current_approval()` and as `approval=` if it declares that
parameter. Deny → it does not run; the call returns `Denied` ("denied: <reason>"); a
reviewer's question (outcome `asked`) → `Asked`, a `Denied` that carries the question: answer
it (the `reason` of the retry) and call again. Anything but an explicit approve denies.
A failing reviewer gives `ApprovalFailed`, never a denial. `on_deny="raise"`
raises `ToolDenied` / `ReviewFailed` instead. Default: a y/N TTY prompt
(`approvals._internal.terminal`).
The design in context: docs/ARCHITECTURE.md, "In-process review".
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import typing
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, ParamSpec, Protocol, Self, TypeVar, cast, overload

from pydantic import TypeAdapter, ValidationError
from pydantic_core import to_jsonable_python

from approvals._internal.questions import agent_text
from approvals._internal.terminal import TerminalApprover, default_handler
from approvals.errors import ApprovalError, InvalidRequest
from approvals.models import (
    DEFAULT_DEADLINE_SECONDS,
    MAX_TEXT,
    ApprovalConfig,
    ApprovalEvent,
    Decision,
    GateRequest,
    check_event_size,
    default_prompt,
    normalize_config,
)
from approvals.review import (
    TIMEOUT_REASON,
    Allow,
    ReviewPluginLike,
    call_maybe_async,
    is_async_callable,
)
from approvals.review import run_review as _run_review

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
T = TypeVar("T")

#: The parameter through which a gated function may receive the reviewer's `Decision`.
APPROVAL_PARAMETER = "approval"

_CURRENT: contextvars.ContextVar[Decision | None] = contextvars.ContextVar(
    "current_approval", default=None
)


def current_approval() -> Decision | None:
    """The approving `Decision` of the gated call running now (None outside one)."""
    return _CURRENT.get()


class ToolDenied(ApprovalError):
    """A gated call was denied. Handlers may raise it to deny; `on_deny="raise"` raises it."""

    code = "denied"

    def __init__(self, reason: str | None = None, *, decision: Decision | None = None) -> None:
        self.reason = reason or "no reason given"
        super().__init__(self.reason)
        self.decision = decision


class ReviewFailed(ApprovalError):
    """The reviewer failed (not a denial); raised for an `ApprovalFailed` with `on_deny="raise"`."""

    code = "review_failed"


@dataclass(frozen=True)
class Denied:
    """The recoverable result of a denied call: `str()` is "denied: <reason>"."""

    tool_name: str
    reason: str
    decision: Decision | None = None

    def __str__(self) -> str:
        return f"denied: {self.reason}"


@dataclass(frozen=True)
class Asked(Denied):
    """The recoverable result of a call a reviewer asked about instead of deciding: a `Denied`
    (the function did not run) carrying the reviewer's `question`; answer it in the retry's
    `reason` and call again. `str()` says so."""

    question: str = ""
    asked_by: str | None = None

    def __str__(self) -> str:
        return agent_text(self.question, self.asked_by)


@dataclass(frozen=True)
class ApprovalFailed:
    """The result of a call whose review failed (handler error, bad answer): not a denial."""

    tool_name: str
    message: str
    error_type: str | None = None

    def __str__(self) -> str:
        return f"approval error: {self.message}"


Rejection = Denied | ApprovalFailed


DecisionHandler = Callable[[GateRequest], Decision | Awaitable[Decision]]
Handler = DecisionHandler | ReviewPluginLike


class GatedFunction(Protocol[P, R_co]):
    """A function wrapped by `require_approval` (as a method, its bound form loses the params)."""

    approval_config: ApprovalConfig | None
    annotations: dict[str, Any] | None
    __name__: str
    __wrapped__: Callable[..., Any]

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co: ...

    @overload
    def __get__(self, instance: None, owner: type[Any] | None = None) -> Self: ...

    @overload
    def __get__(self, instance: object, owner: type[Any] | None = None) -> Callable[..., R_co]: ...


class Gate(Protocol):
    """The decorator `require_approval(...)` returns."""

    @overload
    def __call__(
        self, fn: Callable[P, Coroutine[Any, Any, R]]
    ) -> GatedFunction[P, Coroutine[Any, Any, R | Rejection]]: ...

    @overload
    def __call__(self, fn: Callable[P, R]) -> GatedFunction[P, R | Rejection]: ...


def merge_annotations(
    base: Mapping[str, Any] | None, config: ApprovalConfig | None
) -> dict[str, Any] | None:
    """Overlay the sensitivity hints on `base`: pii → destructiveHint; secret → also openWorldHint.

    The caller's own annotations win on collision; None instead of an empty dict.
    """
    overlay: dict[str, Any] = {}
    if config is not None and config.sensitivity in ("pii", "secret"):
        overlay["destructiveHint"] = True
    if config is not None and config.sensitivity == "secret":
        overlay["openWorldHint"] = True
    merged = {**overlay, **(base or {})}
    return merged or None


def _reason_for(
    reason: str | Callable[[dict[str, Any]], str | None] | None, arguments: dict[str, Any]
) -> str | None:
    """The reason of one call: `reason` itself, or what it returns for the arguments (None
    when it fails or returns anything but text)."""
    if reason is None or isinstance(reason, str):
        return reason
    try:
        found = reason(dict(arguments))
    except Exception:
        log.warning("require_approval reason function failed", exc_info=True)
        return None
    return found if isinstance(found, str) else None


def require_approval(
    handler: Handler | None = None,
    *,
    config: bool | ApprovalConfig | dict[str, Any] | None = True,
    annotations: Mapping[str, Any] | None = None,
    name: str | None = None,
    on_deny: Literal["return", "raise"] = "return",
    timeout: float | None = None,
    reason: str | Callable[[dict[str, Any]], str | None] | None = None,
) -> Gate:
    """Gate a sync or async function behind `handler` (default: `default_handler`).

    `config`: True (default review), an `ApprovalConfig` or its dict form, or
    False/None (no gate). `annotations`: the tool's own advisory annotations,
    overlaid with the sensitivity hints (`.annotations` on the result).
    `name`: the tool name reviewers see (default: the function's name).
    `on_deny`: "return" a `Denied` / `ApprovalFailed`, or "raise" `ToolDenied`
    / `ReviewFailed`. `timeout`: seconds to wait for the handler (a timeout
    denies with "approval timeout"); review plugins default to the config's deadline.
    `reason`: why the call is made, shown to reviewers under the title: a text, or a
    function of the call's canonical arguments that returns one (a failing function
    leaves the reason out; it never stops the review).
    """
    cfg = normalize_config(config)
    if on_deny not in ("return", "raise"):
        raise ValueError(f"on_deny must be 'return' or 'raise', not {on_deny!r}")
    merged = merge_annotations(annotations, cfg)

    def decorate(fn: Callable[..., Any]) -> Any:
        if not callable(fn):
            raise TypeError(
                "require_approval(...) returns a decorator: write @require_approval() "
                "with parentheses, or pass the handler as require_approval(handler)"
            )
        tool: str = name or str(getattr(fn, "__name__", type(fn).__name__))
        try:
            ApprovalEvent(tool_name=tool)
        except ValidationError as e:
            raise InvalidRequest(f"invalid tool name {tool!r}: {e}") from e
        signature = inspect.signature(fn)
        inject = APPROVAL_PARAMETER in signature.parameters

        def prepare(args: Any, kwargs: Any) -> tuple[GateRequest, inspect.BoundArguments]:
            assert cfg is not None
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments = canonical_arguments(signature, bound)
            request = GateRequest(
                tool_name=tool,
                config=cfg,
                arguments=arguments,
                call_id=f"call_{uuid.uuid4().hex}",
                prompt=cfg.prompt or default_prompt(tool, arguments),
                reason=_reason_for(reason, arguments),
            )
            return request, bound

        def call_args(
            request: GateRequest,
            bound: inspect.BoundArguments,
            args: Any,
            kwargs: Any,
            decision: Decision,
        ) -> tuple[Any, Any, Decision] | Denied:
            if decision.edited_arguments is not None:
                edited = edited_call(fn, signature, bound, decision.edited_arguments)
                if isinstance(edited, str):
                    reason = f"the reviewer's edit does not fit {tool}: {edited}"
                    return Denied(tool, reason[:MAX_TEXT], decision)
                bound = edited
                args, kwargs = bound.args, bound.kwargs
                decision = decision.model_copy(update={"original_arguments": request.arguments})
            if not inject:
                return args, kwargs, decision
            bound.arguments[APPROVAL_PARAMETER] = decision
            return bound.args, bound.kwargs, decision

        def reject(outcome: Rejection) -> Rejection:
            log.info("gated call not run tool=%s outcome=%s", tool, outcome)
            if on_deny == "return":
                return outcome
            if isinstance(outcome, Denied):
                raise ToolDenied(outcome.reason, decision=outcome.decision)
            raise ReviewFailed(outcome.message, details=outcome.error_type)

        wrapper: Any
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                if cfg is None:
                    return await fn(*args, **kwargs)
                request, bound = prepare(args, kwargs)
                outcome = await review_async(handler or default_handler, request, timeout)
                if not isinstance(outcome, Decision):
                    return reject(outcome)
                called = call_args(request, bound, args, kwargs, outcome)
                if isinstance(called, Denied):
                    return reject(called)
                args, kwargs, outcome = called
                token = _CURRENT.set(outcome)
                try:
                    return await fn(*args, **kwargs)
                finally:
                    _CURRENT.reset(token)

            wrapper = async_wrapper
        else:

            @functools.wraps(fn)
            def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
                if cfg is None:
                    return fn(*args, **kwargs)
                request, bound = prepare(args, kwargs)
                outcome = review_sync(handler or default_handler, request, timeout)
                if not isinstance(outcome, Decision):
                    return reject(outcome)
                called = call_args(request, bound, args, kwargs, outcome)
                if isinstance(called, Denied):
                    return reject(called)
                args, kwargs, outcome = called
                token = _CURRENT.set(outcome)
                try:
                    return fn(*args, **kwargs)
                finally:
                    _CURRENT.reset(token)

            wrapper = sync_wrapper
        wrapper.approval_config = cfg
        wrapper.annotations = merged
        return wrapper

    return cast(Gate, decorate)


def edited_call(
    fn: Callable[..., Any],
    signature: inspect.Signature,
    bound: inspect.BoundArguments,
    edited: Mapping[str, Any],
) -> inspect.BoundArguments | str:
    """The call with a reviewer's `edited` arguments, checked against `fn`'s signature (the
    names bind, each annotated value validates with pydantic), or why it does not fit."""
    if APPROVAL_PARAMETER in edited:
        return f"{APPROVAL_PARAMETER!r} is not an argument a reviewer may set"
    params = list(signature.parameters.values())
    leading = []
    if params and params[0].name in ("self", "cls") and params[0].name in bound.arguments:
        leading.append(bound.arguments[params[0].name])
    try:
        new = signature.bind(*leading, **edited)
    except TypeError as e:
        return str(e)
    new.apply_defaults()
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolvable annotations: the names still had to bind
        hints = {}
    for name, value in list(new.arguments.items()):
        hint = hints.get(name)
        if hint is None or name == APPROVAL_PARAMETER or name not in edited:
            continue
        try:
            new.arguments[name] = TypeAdapter(hint).validate_python(value)
        except ValidationError as e:
            return f"{name}: {e.errors()[0].get('msg', 'invalid value')}"
        except Exception:  # a type pydantic cannot build: leave the value as edited
            continue
    return new


def canonical_arguments(
    signature: inspect.Signature, bound: inspect.BoundArguments
) -> dict[str, Any]:
    """The bound call as a JSON-safe name → value dict, as a reviewer should see it.

    Defaults are applied by the caller; `**kwargs` are flattened in; `self`/`cls`
    and the `approval` parameter are left out; values JSON cannot hold are shown
    as their `repr`.
    """
    params = list(signature.parameters.values())
    skip = {APPROVAL_PARAMETER}
    if params and params[0].name in ("self", "cls"):
        skip.add(params[0].name)
    out: dict[str, Any] = {}
    for key, value in bound.arguments.items():
        if key in skip:
            continue
        if signature.parameters[key].kind is inspect.Parameter.VAR_KEYWORD:
            out.update({str(k): json_safe(v) for k, v in value.items()})
        else:
            out[key] = json_safe(value)
    return out


def json_safe(value: Any) -> Any:
    """`value` as plain JSON types (pydantic's rules); anything else becomes its `repr`."""
    try:
        return to_jsonable_python(value, fallback=repr)
    except Exception:
        return repr(value)


Reviewed = Decision | Rejection


def review_sync(handler: Handler, request: GateRequest, limit: float | None) -> Reviewed:
    """Review `request` from synchronous code; async handlers run on a private event loop."""
    direct = isinstance(handler, TerminalApprover) or (
        not isinstance(handler, ReviewPluginLike)
        and limit is None
        and not is_async_callable(handler)
    )
    if not direct:
        return _run_blocking(lambda: review_async(handler, request, limit))
    decide = cast(DecisionHandler, handler)
    try:
        result: Any = decide(request)
        if inspect.isawaitable(result):
            awaitable = result
            result = _run_blocking(lambda: _await(awaitable))
    except Exception as e:
        return _from_exception(request, e)
    return _from_result(request, result)


async def review_async(handler: Handler, request: GateRequest, limit: float | None) -> Reviewed:
    """Review `request` from async code; sync handlers run in a worker thread."""
    if isinstance(handler, ReviewPluginLike):
        return await _review_with_plugin(handler, request, limit)
    scope = asyncio.timeout(limit)
    try:
        async with scope:
            if isinstance(handler, TerminalApprover):
                result: Any = await handler.review_async(request)
            else:
                result = await call_maybe_async(handler, request)
    except Exception as e:
        if isinstance(e, TimeoutError) and scope.expired():
            return Denied(request.tool_name, TIMEOUT_REASON)
        return _from_exception(request, e)
    return _from_result(request, result)


async def _review_with_plugin(
    plugin: ReviewPluginLike, request: GateRequest, limit: float | None
) -> Reviewed:
    try:
        event = request.event()
        check_event_size(event)
    except (ValidationError, InvalidRequest) as e:
        return ApprovalFailed(request.tool_name, str(e), type(e).__name__)
    if limit is None:
        limit = request.config.deadline_seconds or float(DEFAULT_DEADLINE_SECONDS)
    context = {"config": request.config, "prompt": request.prompt, "call_id": request.call_id}
    verdict = await _run_review(plugin, event, context, limit)
    if isinstance(verdict, Allow):
        decision = verdict.decision or Decision.approve(for_session=verdict.for_session, via="hook")
        return _from_result(request, decision)
    if verdict.cause == "error":
        return ApprovalFailed(request.tool_name, verdict.reason)
    if verdict.decision is not None and verdict.decision.outcome == "asked":
        return _asked(request, verdict.decision)
    return Denied(request.tool_name, verdict.reason, verdict.decision)


def _asked(request: GateRequest, decision: Decision) -> Asked:
    question = decision.question or ""
    text = agent_text(question, decision.decided_by)
    return Asked(request.tool_name, text[:MAX_TEXT], decision, question, decision.decided_by)


def _from_result(request: GateRequest, result: object) -> Reviewed:
    tool = request.tool_name
    if not isinstance(result, Decision):
        return ApprovalFailed(
            tool, f"approval handler returned {type(result).__name__}, expected a Decision"
        )
    if result.outcome == "asked":
        return _asked(request, result)
    if result.outcome == "error":
        return ApprovalFailed(tool, result.reason or "the reviewer reported an error")
    if not result.approves:  # deny, or an outcome this code does not know: never a run
        return Denied(tool, result.reason or "no reason given", result)
    options = request.config.options or ()
    if request.config.kind == "choice" and result.selection not in options:
        return ApprovalFailed(
            tool, f"approved with selection {result.selection!r}, not one of {list(options)}"
        )
    log.info("gated call approved tool=%s call_id=%s via=%s", tool, request.call_id, result.via)
    return result


def _from_exception(request: GateRequest, e: Exception) -> Rejection:
    if isinstance(e, ToolDenied):
        return Denied(request.tool_name, e.reason, e.decision)
    log.warning("approval handler failed tool=%s error=%r", request.tool_name, e)
    return ApprovalFailed(request.tool_name, str(e) or type(e).__name__, type(e).__name__)


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


def _run_blocking(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion from sync code, even when this thread runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="approval-gate") as pool:
        return pool.submit(lambda: asyncio.run(factory())).result()
