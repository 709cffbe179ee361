"""A request with large texts is drawn (and so masked) on a worker thread, not the event loop."""

from __future__ import annotations

import threading

import pytest

from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest
from bot.masking.masker import LARGE_REQUEST_CHARS
from bot.slack.delivery import dispatcher
from bot.slack.render import request_message as blocks


async def test_large_requests_are_drawn_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[threading.Thread] = []
    real = blocks.request_message

    def drawing(request: ApprovalRequest) -> object:
        threads.append(threading.current_thread())
        return real(request)

    monkeypatch.setattr(blocks, "request_message", drawing)

    def request(size: int) -> ApprovalRequest:
        event = ApprovalEvent(tool_name="deploy", arguments={"a": "x" * size})
        return ApprovalRequest(event=event, config=ApprovalConfig(), channel="C1")

    await dispatcher._drawn(request(100))
    await dispatcher._drawn(request(LARGE_REQUEST_CHARS + 1))
    assert threads[0] is threading.current_thread()
    assert threads[1] is not threading.current_thread()
