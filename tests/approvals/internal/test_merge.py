"""merge_outcomes: deny > ask > allow, winning-rank reasons, sticky stop, ordered contexts."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from approvals._internal.merge import MergedOutcome, RuleOutcome, merge_outcomes
from approvals.errors import InvalidRequest


def out(decision: str | None = None, **fields: Any) -> RuleOutcome:
    return RuleOutcome.model_validate({"decision": decision, **fields})


def test_nothing_gives_none() -> None:
    assert merge_outcomes([]) == MergedOutcome(decision="none")
    merged = merge_outcomes([out(), out(systemMessage="hi")])
    assert merged.decision == "none"
    assert merged.reason is None
    assert merged.system_messages == ("hi",)


@pytest.mark.parametrize(
    ("decisions", "expected"),
    [
        (["allow"], "allow"),
        (["approve"], "allow"),
        (["allow", "ask"], "ask"),
        (["ask", "allow", None], "ask"),
        (["allow", "ask", "deny"], "deny"),
        (["block", "allow"], "deny"),
        (["approve", "block", "ask"], "deny"),
        ([None, "approve"], "allow"),
    ],
)
def test_precedence(decisions: list[str | None], expected: str) -> None:
    assert merge_outcomes([out(d) for d in decisions]).decision == expected


def test_only_the_winning_ranks_reasons_are_joined_by_a_blank_line() -> None:
    merged = merge_outcomes(
        [
            out("ask", reason="needs a human"),
            out("deny", reason="prod is frozen"),
            out("allow", reason="looks fine"),
            out("block", reason="outside business hours"),
            out("deny"),
        ]
    )
    assert merged.decision == "deny"
    assert merged.reason == "prod is frozen\n\noutside business hours"


def test_ask_reasons_when_ask_wins_and_allow_reasons_when_allow_wins() -> None:
    asked = merge_outcomes([out("allow", reason="ok"), out("ask", reason="confirm")])
    assert (asked.decision, asked.reason) == ("ask", "confirm")
    allowed = merge_outcomes([out("allow", reason="rule 1"), out("approve", reason="rule 2")])
    assert (allowed.decision, allowed.reason) == ("allow", "rule 1\n\nrule 2")


def test_no_reason_at_the_winning_rank_gives_none_and_empty_reasons_are_skipped() -> None:
    merged = merge_outcomes([out("ask", reason="please"), out("deny", reason=""), out("deny")])
    assert merged.decision == "deny"
    assert merged.reason is None


def test_the_first_stop_and_its_stop_reason_stick() -> None:
    merged = merge_outcomes(
        [
            out("allow"),
            out(None, **{"continue": False, "stopReason": "budget exhausted"}),
            out("deny", **{"continue": False, "stopReason": "later stop"}),
        ]
    )
    assert merged.stop is True
    assert merged.stop_reason == "budget exhausted"
    assert merged.decision == "deny"


def test_a_first_stop_without_reason_keeps_none() -> None:
    merged = merge_outcomes(
        [out(None, **{"continue": False}), out(None, **{"continue": False, "stopReason": "x"})]
    )
    assert (merged.stop, merged.stop_reason) == (True, None)


def test_continue_true_never_stops() -> None:
    merged = merge_outcomes([out("deny", **{"continue": True, "stopReason": "ignored"})])
    assert (merged.stop, merged.stop_reason) == (False, None)


def test_contexts_and_system_messages_accumulate_in_order() -> None:
    merged = merge_outcomes(
        [
            out("allow", additionalContext="a", systemMessage="one"),
            out(None, additionalContext=""),
            out("deny", additionalContext="b"),
            out("ask", additionalContext="c", systemMessage="two"),
        ]
    )
    assert merged.additional_context == ("a", "b", "c")
    assert merged.system_messages == ("one", "two")


def test_accepts_raw_hook_json_and_snake_case() -> None:
    merged = merge_outcomes(
        [
            {"decision": "block", "reason": "no", "suppressOutput": True},
            {"decision": "ask", "continue_": False, "stop_reason": "snake", "system_message": "m"},
        ]
    )
    assert merged.decision == "deny"
    assert merged.reason == "no"
    assert merged.stop_reason == "snake"
    assert merged.system_messages == ("m",)


def test_accepts_a_generator() -> None:
    assert merge_outcomes(out(d) for d in ["allow", "ask"]).decision == "ask"


@pytest.mark.parametrize("bad", [{"decision": "maybe"}, {"continue": "perhaps"}])
def test_invalid_output_is_rejected(bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest, match="invalid hook output"):
        merge_outcomes([bad])


# --- properties -------------------------------------------------------------

decisions = st.sampled_from([None, "allow", "approve", "ask", "deny", "block"])
# Reasons without newlines, so a merged reason splits back into its parts.
reasons = st.one_of(st.none(), st.text(st.characters(exclude_characters="\n"), max_size=5))
outputs = st.builds(
    RuleOutcome,
    decision=decisions,
    reason=reasons,
    continue_=st.booleans(),
    stop_reason=st.one_of(st.none(), st.text(max_size=5)),
    additional_context=st.one_of(st.none(), st.text(max_size=5)),
    system_message=st.one_of(st.none(), st.text(max_size=5)),
)


@given(st.lists(outputs), st.lists(outputs))
def test_any_deny_wins(before: list[RuleOutcome], after: list[RuleOutcome]) -> None:
    for denial in ("deny", "block"):
        assert merge_outcomes([*before, out(denial), *after]).decision == "deny"


@given(st.lists(outputs, max_size=8), st.randoms(use_true_random=False))
def test_decision_does_not_depend_on_order(items: list[RuleOutcome], rnd: Any) -> None:
    shuffled = list(items)
    rnd.shuffle(shuffled)
    first, second = merge_outcomes(items), merge_outcomes(shuffled)
    assert first.decision == second.decision
    assert first.stop == second.stop
    # The same reasons win, in whatever order they came.
    assert (first.reason is None) == (second.reason is None)
    assert sorted((first.reason or "").split("\n\n")) == sorted((second.reason or "").split("\n\n"))


@given(st.lists(outputs.filter(lambda o: o.decision is None)))
def test_none_when_nothing_decided(items: list[RuleOutcome]) -> None:
    merged = merge_outcomes(items)
    assert merged.decision == "none"
    assert merged.reason is None


@given(st.lists(outputs))
def test_decision_is_the_strictest_present(items: list[RuleOutcome]) -> None:
    present = {o.decision for o in items}
    expected = (
        "deny"
        if present & {"deny", "block"}
        else "ask"
        if "ask" in present
        else "allow"
        if present & {"allow", "approve"}
        else "none"
    )
    assert merge_outcomes(items).decision == expected


@given(st.lists(outputs))
def test_accumulation_keeps_every_non_empty_entry_in_order(items: list[RuleOutcome]) -> None:
    merged = merge_outcomes(items)
    assert list(merged.additional_context) == [
        o.additional_context for o in items if o.additional_context
    ]
    assert list(merged.system_messages) == [o.system_message for o in items if o.system_message]
    halting = [o for o in items if not o.continue_]
    assert merged.stop is bool(halting)
    assert merged.stop_reason == (halting[0].stop_reason if halting else None)
