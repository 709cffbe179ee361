"""`repair_line`: a JSON line with lone surrogates becomes one the SDK's parser accepts, and
changes nothing else."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
from hypothesis import given
from hypothesis import strategies as st

from bot.mcp.stdio import repair_line

any_text = st.text(st.characters(), max_size=20)  # surrogates included
values = st.recursive(
    st.none() | st.booleans() | st.integers() | any_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text, inner, max_size=3),
    max_leaves=10,
)


def has_lone_surrogate(value: Any) -> bool:
    text = json.dumps(value, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


@given(arguments=st.dictionaries(any_text, values, max_size=4))
def test_every_line_node_can_write_parses_after_repair(arguments: dict[str, Any]) -> None:
    request = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "t"}}
    request["params"]["arguments"] = arguments  # type: ignore[index]
    line = json.dumps(request)  # ASCII, surrogates as \\uXXXX: what JSON.stringify writes
    repaired = repair_line(line)
    message = types.jsonrpc_message_adapter.validate_json(repaired, by_name=False)
    assert message.id == 7  # type: ignore[union-attr]
    if not has_lone_surrogate(arguments):
        assert json.loads(repaired) == request  # nothing else changed


def test_a_lone_surrogate_becomes_the_replacement_character() -> None:
    line = '{"a": "x \\ud800 y", "b": "\\ud83d\\ude00", "c": "\\\\ud800"}'
    assert json.loads(repair_line(line)) == {"a": "x \ufffd y", "b": "😀", "c": "\\ud800"}


def test_lines_without_surrogates_or_json_pass_untouched() -> None:
    assert repair_line('{"a": 1}\n') == '{"a": 1}\n'
    assert repair_line("not json \\ud800\n") == "not json \\ud800\n"
