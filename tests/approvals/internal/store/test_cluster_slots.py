"""Redis Cluster: with a hash-tag prefix every key of a deployment is in one slot, so each
Lua script (whose KEYS all come from `Keys`) stays single-slot."""

from __future__ import annotations

import inspect

from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from approvals._internal.store.keys import Keys


def every_key(keys: Keys, arg: str) -> list[str]:
    found = []
    for name, member in inspect.getmembers(type(keys)):
        if name.startswith("_") or name in ("prefix", "retention_seconds", "pattern"):
            continue
        if isinstance(member, property):
            found.append(getattr(keys, name))
        elif callable(member):
            method = getattr(keys, name)
            params = [
                p
                for p in inspect.signature(method).parameters.values()
                if p.default is inspect.Parameter.empty
            ]
            found.append(method(*[arg] * len(params)))
    return [k for k in found if isinstance(k, str)]


@given(arg=st.text(min_size=1, max_size=40))
def test_a_hash_tag_prefix_puts_every_key_in_one_slot(arg: str) -> None:
    keys = Keys("{approvals}")
    found = every_key(keys, arg)
    assert len(found) >= 15, found
    slots = {key_slot(k.encode("utf-8", "surrogatepass")) for k in found}
    assert slots == {key_slot(b"approvals")}, found
