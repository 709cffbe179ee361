"""Asking the agent: a reviewer's question instead of a decision, and the retry that answers it.

Internal to approval-bot (not a stable API). Who may ask (who may decide, on a yes/no request
whose route allows questions), the question's bounds (`MAX_QUESTION`), what the agent is told
(`agent_text`), and the link (`Keys.question`, `link_seconds`) that lets the caller's next
request for the tool in that session be posted in the asked request's thread. How the
scripts and the dispatcher use it: docs/ARCHITECTURE.md, "Compare-and-set" and "Questions".
"""

from __future__ import annotations

import json
from datetime import datetime

from approvals.models import (
    MAX_DEADLINE_SECONDS,
    MAX_QUESTION,
    ApprovalRequest,
    Question,
    SlackMessage,
)

__all__ = [
    "MAX_QUESTION",
    "MIN_LINK_SECONDS",
    "agent_text",
    "link_for",
    "link_seconds",
    "offered",
    "thread_of",
]

#: The shortest life of a question's link: an agent gets at least this long to answer.
MIN_LINK_SECONDS = 60


def offered(request: ApprovalRequest) -> bool:
    """Whether a reviewer may ask the agent a question on `request`: a yes/no request whose
    route allows it."""
    return request.config.kind == "approval" and request.config.allow_questions


def link_seconds(request: ApprovalRequest) -> int:
    """How long the caller has to answer: the time the route gave the request to be decided
    (its deadline less its creation), at least `MIN_LINK_SECONDS`, at most a week."""
    if request.deadline_at is None:
        return MIN_LINK_SECONDS
    seconds = (request.deadline_at - request.created_at).total_seconds()
    return int(min(MAX_DEADLINE_SECONDS, max(MIN_LINK_SECONDS, seconds)))


def thread_root(request: ApprovalRequest) -> SlackMessage | None:
    """The message a reply about `request` goes under: the root of the thread its own message
    is in (a retry posted in a thread keeps its replies in that thread), or its message."""
    thread = thread_of(request)
    if thread is not None:
        return thread
    return request.message


def link_for(request: ApprovalRequest, question: str, asked_by: str, at: datetime) -> str:
    """The link's value (a `Question` as JSON) that the caller's retry takes."""
    return Question(
        request_id=request.id,
        question=question,
        asked_by=asked_by,
        asked_at=at,
        thread=thread_root(request),
    ).model_dump_json()


def thread_of(request: ApprovalRequest) -> SlackMessage | None:
    """The thread `request` is posted in: the thread of the question it answers, on its first
    route round and when that thread is in the channel it is posted to (None: a message of its
    own in its channel)."""
    answers = request.answers
    if answers is None or answers.thread is None or request.escalations:
        return None
    if answers.thread.channel != request.channel:
        return None
    return answers.thread


def agent_text(question: str | None, asked_by: str | None = None) -> str:
    """What the agent is told when a reviewer asked instead of deciding: the question, that the
    call was not run, and how to answer (in its own words before it retries the call)."""
    who = asked_by or "a reviewer"
    quoted = json.dumps(question or "", ensure_ascii=False)
    return (
        f"Not approved yet: {who} asked a question before deciding: {quoted}. "
        "The call was not run. Answer the question in the text you write before retrying "
        "the call (the reviewer reads that text as your answer), then retry the same call, "
        "changed if the answer changes it."
    )
