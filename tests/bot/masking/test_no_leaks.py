"""No secret reaches Slack: every surface rendered with every fake of the corpus in every field
an agent controls, as it leaves through `bot.masking.masker.outbound`, shows no piece of it.

A request message (`bot.slack.render.request_message`: the post, the update, the escalation note)
is a
`bot.masking.masker.Masked` and leaves as it was drawn, not scanned again: the checks here see
exactly that, and properties throw fakes (whole, among random text, or split over two
fields) at every field and look at the very body the dispatcher's client sends.

The same holds through the real app in `tests/e2e/test_no_leaks_flow.py`.
"""

from __future__ import annotations

import json
import re
import shlex
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from approvals._internal.file_changes import Original, changes_for
from approvals._internal.risk_hints import request_risks
from approvals.models import (
    MAX_OPTION_LEN,
    MAX_QUESTION,
    Answered,
    ApprovalConfig,
    ApprovalEvent,
    ApprovalRequest,
    CallContext,
    Decision,
    FileChange,
    Proposal,
    Question,
    SlackMessage,
    Vote,
    utcnow,
)
from bot.masking import masker as masking
from bot.masking.masker import Masked, mask_text, outbound
from bot.slack import action_ids as ids
from bot.slack import home
from bot.slack.client import json_body
from bot.slack.delivery import copies
from bot.slack.render import edit_form as bot_edits
from bot.slack.render import modals
from bot.slack.render import request_message as blocks
from tests.support.secret_corpus import FAKES, Fake, leaked_piece

SHORT = 200  # tool_name, agent, session_id
OPTION = 75


def _short(fake: Fake, limit: int) -> str | None:
    """The fake as a short field: whole if it fits, else its bare secret if that is
    recognisable without its context (a token), else nothing."""
    if len(fake.text) <= limit and "\n" not in fake.text:
        return fake.text
    if len(fake.secret) <= limit and "\n" not in fake.secret:
        return fake.secret if mask_text(fake.secret) != fake.secret else None
    return None


def requests_for(fake: Fake) -> Iterator[ApprovalRequest]:
    """Requests carrying `fake` in every field an agent controls, in each state."""
    value = fake.as_value
    text = fake.text
    short = _short(fake, SHORT)
    event = ApprovalEvent(
        tool_name=short or "deploy",
        arguments={"plain": value, "deep": {"x": [{"y": value}]}, "n": 1},
        command=text,
        path=text[:4096],
        cwd=text[:4096],
        agent=short,
        session_id=short,
        permissions={"rules": [value]},
    )
    option = _short(fake, OPTION)
    configs = [ApprovalConfig(prompt=text), ApprovalConfig(kind="input")]
    if option:
        configs.append(ApprovalConfig(kind="choice", options=("keep", option)))
    events = [event, *context_events(fake, event)]
    for config, event in [(c, e) for c in configs for e in events]:
        pending = ApprovalRequest(event=event, config=config, requester=short, quorum=2)
        yield pending
        yield pending.model_copy(
            update={"votes": [Vote(user="U1", outcome="approve", reason=text)]}
        )
        for status, decision in (
            ("denied", Decision.deny(text, by=short or "U2")),
            (
                "approved",
                Decision.approve(
                    by="U2",
                    input=text if config.kind == "input" else None,
                    selection=option if config.kind == "choice" else None,
                ),
            ),
            ("error", Decision.error(text, by="slack")),
            ("cancelled", Decision.deny(text, by=short or "agent")),
        ):
            yield pending.model_copy(update={"status": status, "decision": decision})
        # Approve with edits: a proposal on the pending request, an approval of the edit.
        edited = {"plain": "changed", "added": value, "deep": {"x": [{"y": text}]}, "n": 2}
        proposal = Proposal(arguments=edited, by="U3", note=text, version="v1")
        yield pending.model_copy(update={"proposal": proposal, "votes": ()})
        approved = Decision.approve(by="U2").model_copy(
            update={"edited_arguments": edited, "edited_by": "U3"}
        )
        yield pending.model_copy(update={"status": "approved", "decision": approved})
        # A reviewer's question (an agent may echo a secret into it, or a reviewer paste one):
        # asked, then answered in the thread; and the retry that shows it as what it answers.
        if len(text) <= MAX_QUESTION and config.kind == "approval":
            asked = pending.model_copy(
                update={"status": "asked", "decision": Decision.ask(text, by=short or "U2")}
            )
            yield asked
            yield asked.model_copy(update={"answered": Answered(request_id="apr_retry")})
            root = SlackMessage(channel="C1", ts="1.2")
            question = Question(
                request_id=pending.id, question=text, asked_by="U2", asked_at=utcnow(), thread=root
            )
            yield pending.model_copy(update={"answers": question, "channel": "C1"})


def context_files(fake: Fake, text: str) -> tuple[FileChange, ...]:
    """The diffs of calls carrying `text` every way a file change can: an Edit's old and new
    strings against a file holding it, a Write, a NotebookEdit, a Codex patch, a unified diff."""
    plus = "\n".join("+" + line for line in text.splitlines())
    minus = "\n".join("-" + line for line in text.splitlines())
    n = len(text.splitlines())
    diff = f"--- a/f.txt\n+++ b/f.txt\n@@ -1,{n} +1,{n} @@\n{minus}\n{plus}\n"
    calls: list[tuple[str, dict[str, Any], dict[str, Original]]] = [
        (
            "Edit",
            {"file_path": "/srv/a.py", "old_string": text, "new_string": f"x = 1\n{text}\n"},
            {"/srv/a.py": Original(True, f"head\n{text}\ntail\n")},
        ),
        ("Write", {"file_path": "/srv/b.env", "content": f"{text}\n"}, {}),
        (
            "Write",
            {"file_path": "/srv/c.env", "content": "new"},
            {"/srv/c.env": Original(True, text)},
        ),
        ("NotebookEdit", {"notebook_path": "/srv/n.ipynb", "new_source": text}, {}),
        ("apply_patch", {"command": f"*** Begin Patch\n*** Add File: d.txt\n{plus}\n"}, {}),
        ("Bash", {"command": f"git apply <<'EOF'\n{diff}EOF"}, {}),
    ]
    found: list[FileChange] = []
    for tool, arguments, originals in calls:
        found += changes_for(tool, arguments, originals)[0]
    return tuple(found)


def context_events(fake: Fake, event: ApprovalEvent) -> Iterator[ApprovalEvent]:
    """`event` with a context carrying `fake` too: as the agent's reason, the user's request,
    and in the diffs of every kind of file change."""
    text = fake.text
    context = CallContext(reason=text, user_request=text, files=context_files(fake, text))
    yield event.model_copy(update={"context": context, "cwd": "/srv"})


def surfaces(req: ApprovalRequest) -> Iterator[tuple[str, Any]]:
    """Everything the bot can send to Slack about `req` in its state, as the dispatcher and
    the listeners build it."""
    yield "message", blocks.message_for(req)
    # Reminders and decision notices (`bot/slack/delivery/reminders.py`) send the rendered fallback
    # text.
    if req.is_pending:
        yield "reminder", {"text": f"⏰ Reminder: {blocks.request_message(req)['text']}"}
    else:
        yield "notice", {"text": f"Decided. {blocks.decided_message(req)['text']}"}
    # The App Home tab and /approvals show it too: waiting while pending, else recent.
    lists = home.Lists([req], []) if req.is_pending else home.Lists([], [req])
    yield "home", {"view": home.home_view(lists)}
    yield "slash one", home.slash_one(req)
    yield "details_modal", {"view": modals.details_modal(req)}
    if req.is_pending:
        yield "slash list", home.slash_list([req])
    if not req.is_pending:
        yield "ephemeral already_decided", {"text": modals.refusal_text("already_decided", req)}
        return
    if req.votes:
        yield "ephemeral already_voted", {"text": modals.refusal_text("already_voted", req)}
        return
    yield "escalated_note", blocks.escalated_note(req, "C0OPS")
    yield "deny_modal", {"view": modals.deny_modal(req, channel="C1", ts="1.2")}
    yield "input_modal", {"view": modals.input_modal(req, channel="C1", ts="1.2")}
    yield "ask_modal", {"view": modals.ask_modal(req, channel="C1", ts="1.2")}
    yield "review_modal", {"view": modals.review_modal(req, channel="C1", ts="1.2")}
    text = bot_edits.edit_text(req)
    if text is not None:
        yield "edit_modal", {"view": modals.edit_modal(req, text, channel="C1", ts="1.2")}
    # A problem with an edit, masked as the listener masks it (even one naming a value).
    refused = str(req.event.arguments.get("plain"))
    problem = bot_edits.problem_text(req, f"plain: {refused} is not valid")
    yield "edit_errors", modals.modal_errors(ids.EDIT_BLOCK, problem)
    yield "ephemeral edited_since", {"text": modals.refusal_text("edited_since", req)}
    options = ", ".join(req.config.options or ())
    yield "ephemeral choose", {"text": f"That did not work: choose one of: {options}"}
    summary = blocks.request_message(req)["text"]
    yield "dm", {"text": f"Your review is needed in <#C1>. {summary}"}


@pytest.mark.parametrize("fake", FAKES, ids=lambda f: f.rule)
def test_no_surface_shows_any_piece_of_a_secret(fake: Fake) -> None:
    for req in requests_for(fake):
        for name, payload in surfaces(req):
            shown = json.dumps(outbound(payload), ensure_ascii=False)
            piece = leaked_piece(shown, fake.secret)
            assert piece is None, f"{fake.rule}: {piece!r} shown on {name} ({req.status})"


def command_requests(fake: Fake) -> Iterator[ApprovalRequest]:
    """Shell commands carrying `fake` where the parsed view and the risk lines show pieces of
    a command: after wrappers and assignments, as an option's value glued to it,
    as a path a risk names (cut to 60 characters there), inside `bash -c`, in an argv list;
    with their risks found as `draft_request` finds them."""
    text = fake.text
    q = shlex.quote(text)
    commands: list[str | list[str]] = [
        f"CI=1 timeout 5 env TOKEN={q} gh pr list",
        f"timeout 5 curl -H {q} https://example.com",
        f"nice rm -rf {q} build",
        f"cp a.txt {q} && git push --force origin {q}",
        f"bash -c {shlex.quote('echo ' + q + ' | sh')}",
        f"timeout 9 mysql -p{q} db",
        ["bash", "-lc", f"curl -u {q} https://example.com"],
    ]
    for command in commands:
        event = ApprovalEvent(
            kind="command",
            tool_name="Bash",
            arguments={"command": command},
            command=command if isinstance(command, str) else None,
            cwd="/srv/app",
            session_id="s-1",
        )
        pending = ApprovalRequest(event=event, risks=request_risks(event))
        yield pending
        yield pending.model_copy(
            update={"status": "denied", "decision": Decision.deny("no", by="U2")}
        )


@pytest.mark.parametrize("fake", FAKES, ids=lambda f: f.rule)
def test_no_parsed_view_or_risk_line_shows_a_secret_in_a_command(fake: Fake) -> None:
    """Wherever the command itself is masked whole (the command block), nothing drawn from it
    (its parsed view, its risk lines, on every surface) shows a piece of the secret. (Some
    fakes glued into a command here make the rules miss them in the command text too: that
    is the masking of free text, `test_no_surface_shows_any_piece_of_a_secret`'s subject.)"""
    shown_any = checked = False
    for req in command_requests(fake):
        command = req.event.command or " ".join(req.event.arguments["command"])
        if leaked_piece(mask_text(command), fake.secret) is not None:
            continue
        checked = True
        for name, payload in surfaces(req):
            shown = json.dumps(outbound(payload), ensure_ascii=False)
            shown_any = shown_any or "As the shell runs it" in shown
            piece = leaked_piece(shown, fake.secret)
            assert piece is None, f"{fake.rule}: {piece!r} shown on {name} ({req.status})"
    assert shown_any or not checked, "the parsed view was drawn"


# ---------------------------------------------------------------- messages sent as drawn

ROOT = Path(__file__).resolve().parents[3]


def test_only_the_renderers_make_a_masked_message() -> None:
    """`Masked` skips the scan on the way out: only `bot.slack.render.request_message` may claim it
    (its class is
    in `bot.masking.masker`), so nothing else can send text unscanned."""
    makers = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "bot").rglob("*.py")
        if re.search(r"(?<!class )\bMasked\(", path.read_text(encoding="utf-8"))
    )
    assert makers == ["bot/slack/render/request_message.py"]


def test_request_messages_leave_exactly_as_drawn() -> None:
    fake = FAKES[0]
    for req in requests_for(fake):
        for message in (blocks.message_for(req), blocks.escalated_note(req, "C0OPS")):
            assert type(message) is Masked
            assert outbound(message) is message
            body = json_body({"channel": "C1", "metadata": copies.metadata(req)}, message)
            assert body["text"] is message["text"] and body["blocks"] is message["blocks"]
    # Merged into another dict, it is a plain payload again: scanned like any other.
    merged = blocks.message_for(next(requests_for(fake))) | {"channel": "C1"}
    assert type(merged) is dict and outbound(merged) is not merged


def _wire(req: ApprovalRequest) -> Iterator[tuple[str, str]]:
    """Every message the dispatcher sends about `req`, as the JSON it puts on the wire."""
    fields = {"channel": "C1", "ts": "1.2", "metadata": copies.metadata(req)}
    drawn = [("message", blocks.message_for(req)), ("escalated", blocks.escalated_note(req, "C0"))]
    if not req.is_pending:
        drawn.append(("request", blocks.request_message(req)))
    for name, message in drawn:
        assert type(message) is Masked
        yield name, json.dumps(json_body(fields, message))


#: Every field of a request an agent (or a reviewer's typed text) controls.
FIELDS = (
    "tool_name", "agent", "session_id", "principal", "command", "path", "cwd", "prompt",
    "argument", "argument_key", "nested", "list_item", "permissions", "option", "reason",
    "input", "selection", "note", "edited", "decided_by", "why", "asked", "diff_new",
    "diff_old", "question",
)  # fmt: skip
SHORT_FIELDS = {"tool_name": 200, "agent": 200, "session_id": 200, "principal": 64}
SHORT_FIELDS |= {"option": MAX_OPTION_LEN, "selection": MAX_OPTION_LEN, "decided_by": 200}
SHORT_FIELDS |= {"question": MAX_QUESTION}
STATES = ("pending", "approved", "denied", "error", "cancelled", "expired", "asked")


def _request(
    values: dict[str, str], status: str, arguments: dict[str, Any] | None = None
) -> ApprovalRequest:
    """A request with each of `values` in its field (see FIELDS), the rest ordinary
    (`arguments` instead of the ordinary ones, if given)."""
    get = values.get
    arguments = dict(arguments) if arguments is not None else {"env": "prod", "n": 1}
    if "argument" in values:
        arguments["plain"] = values["argument"]
    if "argument_key" in values:
        arguments[values["argument_key"]] = "x"
    if "nested" in values:
        arguments["deep"] = {"x": [{"y": values["nested"]}]}
    if "list_item" in values:
        arguments["items"] = ["a", values["list_item"], "b"]
    kind = "choice" if "option" in values or "selection" in values else "approval"
    if "input" in values:
        kind = "input"
    options = ("keep", get("option") or get("selection") or "other") if kind == "choice" else None
    event = ApprovalEvent(
        tool_name=get("tool_name") or "deploy",
        arguments=arguments,
        command=get("command"),
        path=get("path"),
        cwd=get("cwd"),
        agent=get("agent"),
        session_id=get("session_id"),
        permissions={"rules": [values["permissions"]]} if "permissions" in values else None,
    )
    if any(k in values for k in ("why", "asked", "diff_new", "diff_old")):
        old, new = get("diff_old") or "a = 1", get("diff_new") or "a = 2"
        edit = {"file_path": "/srv/a.py", "old_string": old, "new_string": new}
        files, _ = changes_for("Edit", edit, {"/srv/a.py": Original(True, f"x\n{old}\ny\n")})
        context = CallContext(reason=get("why"), user_request=get("asked"), files=files)
        event = event.model_copy(update={"context": context})
    config = ApprovalConfig(kind=kind, options=options, prompt=get("prompt"))
    req = ApprovalRequest(event=event, config=config, principal=get("principal"), quorum=2)
    if "note" in values or "edited" in values:
        edited = {**arguments, "added": get("edited") or "changed"}
        proposal = Proposal(arguments=edited, by="U3", note=get("note"), version="v1")
        req = req.model_copy(update={"proposal": proposal})
        if status == "approved":
            decision = Decision.approve(by="U2").model_copy(
                update={"edited_arguments": edited, "edited_by": "U3"}
            )
            return req.model_copy(update={"status": status, "decision": decision})
    by = get("decided_by") or "U2"
    if "question" in values and status != "asked":
        # A retry answering a reviewer's question: the question is shown on it.
        question = Question(
            request_id="apr_asked", question=values["question"], asked_by=by, asked_at=utcnow()
        )
        req = req.model_copy(update={"answers": question})
    if status == "asked":
        question_text = get("question") or "Which region?"
        decision = Decision.ask(question_text, by=by)
        return req.model_copy(update={"status": status, "decision": decision})
    if status == "pending":
        return req.model_copy(update={"votes": [Vote(user="U1", outcome="approve")]})
    if status == "approved":
        decision = Decision.approve(
            by=by, input=get("input"), selection=get("selection") if kind == "choice" else None
        )
    elif status == "error":
        decision = Decision.error(get("reason") or "boom", by="slack")
    else:
        decision = Decision.deny(get("reason") or "no", by=by)
    return req.model_copy(update={"status": status, "decision": decision})


def _fits(field: str, text: str) -> bool:
    limit = SHORT_FIELDS.get(field)
    return limit is None or (len(text) <= limit and "\n" not in text)


_filler = st.text(string.ascii_letters + string.digits + " .,:;()-/\n", max_size=24)


@settings(max_examples=1000, deadline=None)
@given(
    fake=st.sampled_from(FAKES),
    field=st.sampled_from(FIELDS),
    before=_filler,
    after=_filler,
    status=st.sampled_from(STATES),
)
def test_property_a_fake_in_any_field_never_reaches_the_wire(
    fake: Fake, field: str, before: str, after: str, status: str
) -> None:
    value = f"{before} {fake.text} {after}"
    if not _fits(field, value):
        value = _short(fake, SHORT_FIELDS[field]) or "deploy"
    req = _request({field: value}, status)
    for name, sent in _wire(req):
        piece = leaked_piece(sent, fake.secret)
        assert piece is None, f"{fake.rule} in {field}: {piece!r} sent on {name} ({status})"


@settings(max_examples=1000, deadline=None)
@given(
    fake=st.sampled_from(FAKES),
    fields=st.lists(st.sampled_from(FIELDS), min_size=2, max_size=2, unique=True),
    cut=st.floats(0.1, 0.9),
    status=st.sampled_from(STATES),
)
def test_property_a_fake_split_over_two_fields_shows_no_more_than_a_scan_would(
    fake: Fake, fields: list[str], cut: float, status: str
) -> None:
    """Split over two fields, a secret is two harmless-looking pieces, each masked or not on
    its own: what is sent as drawn shows no more of it than the same message scanned
    whole by `outbound` (as every message was before it was sent as drawn). The scan is
    compared uncut: a mask longer than what it hides makes `outbound` cut a string to its
    old length, and text cut off the end is not text a rule found."""
    at = max(1, int(len(fake.text) * cut))
    parts = {f: p for f, p in zip(fields, (fake.text[:at], fake.text[at:]), strict=True)}
    if not all(_fits(f, p) for f, p in parts.items()):
        return
    req = _request(parts, status)
    for name, sent in _wire(req):
        with patch.object(masking, "_within", lambda text, limit: text):
            scanned = json.dumps(outbound(json.loads(sent)), ensure_ascii=False)
        if leaked_piece(scanned, fake.secret) is None:
            piece = leaked_piece(sent, fake.secret)
            assert piece is None, f"{fake.rule} over {fields}: {piece!r} sent on {name}"


#: Whole private keys of the corpus (their END line included).
_PEM_KEYS = [f.secret for f in FAKES if f.rule == "pem_private_key" and "-----END" in f.secret]


@settings(max_examples=500, deadline=None)
@given(
    key=st.sampled_from(_PEM_KEYS),
    cuts=st.lists(st.floats(0.02, 0.98), min_size=1, max_size=4),
    nested=st.booleans(),
    status=st.sampled_from(STATES),
)
def test_property_a_private_key_split_over_sibling_arguments_never_reaches_the_wire(
    key: str, cuts: list[float], nested: bool, status: str
) -> None:
    """A key cut anywhere into 2-5 pieces, each its own argument (beside others, at the top
    or deep in a list), none of them a key on its own: every piece is masked
    (`masking.spread_values`), on every message sent about the request."""
    points = sorted({max(1, min(len(key) - 1, int(len(key) * c))) for c in cuts})
    pieces = [key[a:b] for a, b in zip([0, *points], [*points, len(key)], strict=True)]
    parts: dict[str, Any] = {f"part{i}": p for i, p in enumerate(pieces)}
    arguments = {"env": "prod", **parts} if not nested else {"env": "prod", "deep": [parts]}
    req = _request({}, status, arguments)
    for name, sent in _wire(req):
        piece = leaked_piece(sent, key)
        assert piece is None, f"{piece!r} of a key in {len(pieces)} pieces sent on {name}"
