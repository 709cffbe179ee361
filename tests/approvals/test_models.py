"""The domain models: config normalisation and validation, events, prompts, size limit."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from approvals.errors import InvalidRequest, PayloadTooLarge
from approvals.models import (
    MAX_EVENT_BYTES,
    ApprovalConfig,
    ApprovalEvent,
    ApprovalRequest,
    Decision,
    check_event_size,
    default_prompt,
    normalize_config,
)


def test_normalize_true_gives_the_default_config() -> None:
    config = normalize_config(True)
    assert config == ApprovalConfig()
    assert config is not None
    assert (config.kind, config.sensitivity, config.options) == ("approval", "low", None)


@pytest.mark.parametrize("value", [False, None])
def test_normalize_false_or_none_means_no_gate(value: bool | None) -> None:
    assert normalize_config(value) is None


def test_normalize_keeps_a_config_as_is() -> None:
    config = ApprovalConfig(kind="input", sensitivity="pii", deadline_seconds=30)
    assert normalize_config(config) is config


def test_normalize_validates_a_dict() -> None:
    config = normalize_config({"kind": "choice", "options": ["blue", "green"]})
    assert config == ApprovalConfig(kind="choice", options=("blue", "green"))


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({"kind": "maybe"}, "kind"),
        ({"sensitivity": "top-secret"}, "sensitivity"),
        ({"colour": "red"}, "colour"),
        ({"deadline_seconds": -5}, "deadline_seconds"),
    ],
)
def test_normalize_rejects_an_invalid_dict(value: dict[str, Any], fragment: str) -> None:
    with pytest.raises(InvalidRequest, match="invalid approval config") as info:
        normalize_config(value)
    assert fragment in str(info.value)
    assert info.value.details, "the pydantic errors travel in details"


@pytest.mark.parametrize("value", ["yes", 1, ["approval"], 0.5])
def test_normalize_rejects_other_types(value: Any) -> None:
    with pytest.raises(InvalidRequest, match=type(value).__name__):
        normalize_config(value)


def test_config_rejects_an_unknown_kind() -> None:
    with pytest.raises(ValidationError, match="kind"):
        ApprovalConfig.model_validate({"kind": "vote"})


def test_config_choice_needs_options() -> None:
    with pytest.raises(ValidationError, match="needs a non-empty 'options'"):
        ApprovalConfig(kind="choice")


def test_config_options_only_for_choice() -> None:
    with pytest.raises(ValidationError, match="only applies to kind 'choice'"):
        ApprovalConfig(kind="approval", options=("a", "b"))


@pytest.mark.parametrize(
    "options",
    [(), ("a", "a"), ("",), ("x" * 76,), tuple(f"o{i}" for i in range(101))],
)
def test_config_rejects_bad_options(options: tuple[str, ...]) -> None:
    with pytest.raises(ValidationError, match="options"):
        ApprovalConfig(kind="choice", options=options)


@pytest.mark.parametrize("deadline", [0, -1, 7 * 24 * 3600 + 1])
def test_config_rejects_a_bad_deadline(deadline: float) -> None:
    with pytest.raises(ValidationError, match="deadline_seconds"):
        ApprovalConfig(deadline_seconds=deadline)


def test_config_accepts_a_deadline_within_a_week() -> None:
    assert ApprovalConfig(deadline_seconds=7 * 24 * 3600).deadline_seconds == 604800


def test_config_rejects_unknown_fields_and_is_frozen() -> None:
    with pytest.raises(ValidationError, match="extra"):
        ApprovalConfig.model_validate({"kind": "approval", "quorum": 2})
    config = ApprovalConfig()
    with pytest.raises(ValidationError, match="frozen"):
        config.kind = "input"  # type: ignore[misc]


@pytest.mark.parametrize("arguments", [[1, 2], "env=prod", 3, None])
def test_event_arguments_must_be_an_object(arguments: Any) -> None:
    with pytest.raises(ValidationError, match="arguments must be a JSON object"):
        ApprovalEvent(tool_name="deploy", arguments=arguments)


def test_event_rejects_unknown_fields() -> None:
    with pytest.raises(ValidationError, match="extra"):
        ApprovalEvent.model_validate({"tool_name": "deploy", "argz": {}})


def test_event_defaults_and_round_trip() -> None:
    event = ApprovalEvent(tool_name="deploy", arguments={"env": "prod"}, call_id="c1")
    assert event.kind == "tool"
    assert ApprovalEvent.model_validate_json(event.model_dump_json()) == event


def test_event_needs_a_tool_name() -> None:
    with pytest.raises(ValidationError, match="tool_name"):
        ApprovalEvent(tool_name="")


def test_decision_rejects_unknown_fields_and_outcomes() -> None:
    with pytest.raises(ValidationError, match="extra"):
        Decision.model_validate({"outcome": "approve", "mood": "happy"})
    with pytest.raises(ValidationError, match="outcome"):
        Decision.model_validate({"outcome": "maybe"})


def test_default_prompt_renders_the_parsed_arguments() -> None:
    prompt = default_prompt("deploy", {"env": "prod", "replicas": 3, "force": True, "tag": None})
    assert prompt == 'Approve deploy(env="prod", replicas=3, force=true, tag=null)?'
    assert default_prompt("ping", {}) == "Approve ping()?"


def test_default_prompt_is_capped() -> None:
    prompt = default_prompt("write", {"text": "x" * 10_000})
    assert len(prompt) <= 3000
    assert prompt.startswith('Approve write(text="xxx')
    assert prompt.endswith("…)?")


def test_request_prompt_comes_from_config_or_default() -> None:
    event = ApprovalEvent(tool_name="deploy", arguments={"env": "prod"})
    assert ApprovalRequest(event=event).prompt == 'Approve deploy(env="prod")?'
    custom = ApprovalRequest(event=event, config=ApprovalConfig(prompt="Ship it?"))
    assert custom.prompt == "Ship it?"


def test_check_event_size_accepts_up_to_the_limit() -> None:
    event = ApprovalEvent(tool_name="t", arguments={"blob": "x" * 1000})
    assert check_event_size(event) == len(event.model_dump_json().encode())


def test_check_event_size_rejects_over_2_mib() -> None:
    event = ApprovalEvent(tool_name="t", arguments={"blob": "x" * MAX_EVENT_BYTES})
    with pytest.raises(PayloadTooLarge, match="2 MiB") as info:
        check_event_size(event)
    assert isinstance(info.value, InvalidRequest)
    assert info.value.code == "payload_too_large"


def test_check_event_size_counts_bytes_not_characters() -> None:
    # Three-byte characters: under the limit in characters, over it in bytes.
    event = ApprovalEvent(tool_name="t", arguments={"text": "€" * (MAX_EVENT_BYTES // 2)})
    with pytest.raises(PayloadTooLarge):
        check_event_size(event)


def test_a_reason_keeps_its_end_and_a_request_its_start_cut_between_words() -> None:
    from approvals.models import clip_reason, clip_request

    words = " ".join(f"word{i}" for i in range(1000))
    reason = clip_reason(words, 100)
    request = clip_request(words, 100)
    assert reason is not None and request is not None
    assert reason.startswith("… word") and reason.endswith("word999") and len(reason) <= 100
    assert request.startswith("word0 ") and request.endswith("…") and len(request) <= 100
    assert all(w.startswith("word") for w in reason[1:].split())  # no word cut in two
    assert clip_reason("  ") is None and clip_request(None) is None
    assert clip_reason("x" * 500, 100) == "…"  # one long word: left out, not cut


def test_a_reason_cut_inside_a_private_key_keeps_none_of_it() -> None:
    from approvals.models import clip_reason

    body = "\n".join("MIIEow" + "A" * 58 for _ in range(30))
    key = f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"
    reason = clip_reason(f"see {key}\nthen I'll deploy it", 200)
    assert reason == "… then I'll deploy it"
    unterminated = clip_reason(f"see -----BEGIN RSA PRIVATE KEY-----\n{body}", 200)
    assert unterminated == "…"
