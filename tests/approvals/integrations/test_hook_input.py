"""`hook_input.loads`: lone surrogates read as U+FFFD whatever the JSON text looks like, also
on its fast path (no surrogate escape in the text, so nothing to clean)."""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from approvals.integrations.hook_input import clean_json, loads

_SURROGATE = re.compile("[\ud800-\udfff]")

#: Text with surrogates (lone, paired, mixed with backslashes and `u` that look like escapes).
_texts = (
    st.text(
        alphabet=st.sampled_from(
            ["a", "\\", "u", "d", "8", "é", "\ud800", "\udc00", "\udfff", "😀"]
        )
    )
    | st.text()
)
_values = st.recursive(
    st.none() | st.booleans() | st.integers() | _texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_texts, inner, max_size=4),
    max_leaves=20,
)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@settings(max_examples=500, deadline=None)
@given(_values, st.booleans())
def test_loads_reads_like_clean_json_and_leaves_no_surrogate(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    try:
        data = text.encode()
    except UnicodeEncodeError:  # a surrogate written raw is not UTF-8: JSON escapes it
        data = json.dumps(value).encode()
    parsed = loads(data)
    assert parsed == clean_json(json.loads(data))
    assert not any(_SURROGATE.search(s) for s in _strings(parsed))
    assert loads(data.decode()) == parsed


def test_an_escaped_backslash_before_u_is_text_not_a_surrogate() -> None:
    assert loads(b'{"a": "\\\\ud800"}') == {"a": "\\ud800"}
    assert loads(b'{"k\\ud800": ["x\\uDFFFy", "\\ud83d\\ude00"]}') == {
        "k\ufffd": ["x\ufffdy", "😀"]
    }
