"""The callback guard (`approvals/webhooks.py`): URL shape, the host allow-list, and the
address check that refuses loopback, private, link-local and other non-public addresses."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from approvals._internal.policy_file import PolicyError, parse_policy
from approvals._internal.service import ApprovalService
from approvals._internal.store.store import ApprovalStore
from approvals.errors import InvalidRequest
from approvals.models import ApprovalEvent
from approvals.webhooks import Callback, CallbackPolicy, as_callback, is_public

#: Networks no callback may reach unless an entry names them (IPv4 and IPv6).
FORBIDDEN = [
    "127.0.0.0/8",  # loopback
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",  # private
    "169.254.0.0/16",  # link-local (cloud metadata at 169.254.169.254)
    "100.64.0.0/10",  # shared (carrier-grade NAT)
    "0.0.0.0/8",
    "224.0.0.0/4",  # multicast
    "240.0.0.0/4",  # reserved
    "::1/128",
    "fc00::/7",  # unique local
    "fe80::/10",  # link-local
    "::ffff:127.0.0.0/104",  # IPv4-mapped loopback
    "::ffff:10.0.0.0/104",
    "2002:7f00::/24",  # 6to4 around 127.0.0.0/8
    "ff00::/8",
]


def policy(*hosts: str) -> CallbackPolicy:
    return CallbackPolicy(allowed_hosts=list(hosts))


@pytest.mark.parametrize("network", FORBIDDEN)
def test_every_forbidden_network_is_refused_with_an_empty_and_a_name_only_allow_list(
    network: str,
) -> None:
    net = ipaddress.ip_network(network)
    for ip in (net[0], net[1] if net.num_addresses > 1 else net[0], net[-1]):
        assert not policy().address_allowed(ip), ip
        assert not policy("hooks.example.com", ".example.org").address_allowed(ip), ip


@given(
    st.one_of(
        *(st.ip_addresses(network=n) for n in FORBIDDEN),
    )
)
def test_no_forbidden_address_is_ever_allowed_without_an_address_entry(ip: object) -> None:
    guard = policy("hooks.example.com", "*.example.net", "203.0.113.0/24")
    assert not guard.address_allowed(str(ip))
    assert not guard.host_allowed(str(ip))


@given(st.text(max_size=60))
def test_address_allowed_fails_closed_on_any_text(text: str) -> None:
    # Anything that is not an address is never allowed as a connect target.
    try:
        ipaddress.ip_address(text)
    except ValueError:
        assert not policy("hooks.example.com").address_allowed(text)


def test_public_addresses_are_allowed_and_an_explicit_entry_opens_a_private_one() -> None:
    assert policy().address_allowed("93.184.216.34")
    assert policy().address_allowed("2606:4700::1111")
    assert is_public(ipaddress.ip_address("8.8.8.8"))
    assert not policy().address_allowed("127.0.0.1")
    assert policy("127.0.0.1").address_allowed("127.0.0.1")
    assert not policy("127.0.0.1").address_allowed("127.0.0.2")
    assert policy("10.0.0.0/8").address_allowed("10.1.2.3")
    assert policy("::1").address_allowed("::1")
    assert policy("127.0.0.1").address_allowed("::ffff:127.0.0.1")  # the same address


def test_host_matching_exact_and_suffix() -> None:
    guard = policy("hooks.example.com", ".corp.example", "*.svc.example")
    assert guard.host_allowed("hooks.example.com")
    assert guard.host_allowed("HOOKS.example.com.")
    assert not guard.host_allowed("evil-hooks.example.com")
    assert not guard.host_allowed("hooks.example.com.evil.io")
    assert guard.host_allowed("a.corp.example")
    assert guard.host_allowed("a.b.svc.example")
    assert not guard.host_allowed("corp.example")  # a suffix entry does not cover the apex
    assert not guard.host_allowed("xcorp.example")
    assert not guard.host_allowed("127.0.0.1")  # names never match addresses


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://hooks.example.com/x", "http:// or https://"),
        ("http:///path", "no host"),
        ("https://user:pw@hooks.example.com/", "credentials"),
        ("https://hooks.example.com/#frag", "fragment"),
        ("https://hooks.example.com:99999/", "not a valid URL"),
        ("https://hooks.example.com/a b", "spaces"),
    ],
)
def test_bad_urls_are_refused(url: str, problem: str) -> None:
    with pytest.raises(InvalidRequest, match="callback") as e:
        as_callback({"url": url})
    assert problem in str(e.value.message)


def test_refusals_name_the_setting() -> None:
    ok = Callback(url="https://hooks.example.com/approvals")
    assert "turned off" in (policy().refusal(ok.url) or "")
    assert "allowed_hosts" in (policy("other.example.com").refusal(ok.url) or "")
    assert policy("hooks.example.com").refusal(ok.url) is None
    assert "allowed_hosts" in (policy("hooks.example.com").refusal("http://127.0.0.1/") or "")
    assert policy("127.0.0.1").refusal("http://127.0.0.1:8080/hook") is None
    assert policy("::1").refusal("http://[::1]:8080/hook") is None


def test_policy_file_section_is_checked() -> None:
    parsed = parse_policy(
        {"callbacks": {"allowed_hosts": ["Hooks.Example.com", "10.0.0.0/8"]}},
        source="p.yaml",
        default_channel="C0APPROVALS",
    )
    assert parsed.callbacks.allowed_hosts == ["hooks.example.com", "10.0.0.0/8"]
    with pytest.raises(PolicyError, match=r"callbacks\.allowed_hosts"):
        parse_policy(
            {"callbacks": {"allowed_hosts": ["10.0.0.0/33"]}},
            source="p.yaml",
            default_channel="C0APPROVALS",
        )
    with pytest.raises(PolicyError, match="did you mean 'allowed_hosts'"):
        parse_policy(
            {"callbacks": {"allowed_host": ["x.example"]}},
            source="p.yaml",
            default_channel="C0APPROVALS",
        )


async def test_service_refuses_a_callback_the_policy_does_not_allow_and_stores_nothing(
    store: ApprovalStore,
) -> None:
    event = ApprovalEvent(tool_name="deploy", call_id="c-1")
    closed = ApprovalService(store, parse_policy({}, source="t", default_channel="C0APPROVALS"))
    with pytest.raises(InvalidRequest, match="turned off"):
        await closed.create(event, callback=Callback(url="https://hooks.example.com/x"))
    assert await store.redis.get(store.keys.call("c-1")) is None
    opened = ApprovalService(
        store,
        parse_policy(
            {"callbacks": {"allowed_hosts": ["hooks.example.com"]}},
            source="t",
            default_channel="C0APPROVALS",
        ),
    )
    with pytest.raises(InvalidRequest, match="not in the policy"):
        await opened.create(event, callback=Callback(url="https://evil.example.com/x"))
    with pytest.raises(InvalidRequest, match="not in the policy"):
        await opened.create(event, callback=Callback(url="http://169.254.169.254/latest"))
    created = await opened.create(event, callback=Callback(url="https://hooks.example.com/x"))
    assert created.request.callback is not None
    assert (await store.get(created.request.id)).callback == created.request.callback


@given(
    st.one_of(
        st.text(max_size=80),
        st.builds(
            lambda scheme, host, rest: f"{scheme}://{host}{rest}",
            st.sampled_from(["http", "https", "HTTP", "ftp", "file", "javascript", ""]),
            st.one_of(
                st.sampled_from(
                    [
                        "hooks.example.com",
                        "hooks.example.com.",
                        "HOOKS.example.com",
                        "hooks.example.com.evil.io",
                        "evil.io#@hooks.example.com",
                        "hooks.example.com@evil.io",
                        "127.0.0.1",
                        "[::1]",
                        "0x7f000001",
                        "2130706433",
                        "localhost",
                    ]
                ),
                st.text(max_size=30),
            ),
            st.text(max_size=20),
        ),
    )
)
def test_a_url_passes_only_with_exactly_the_allowed_host(url: str) -> None:
    guard = policy("hooks.example.com")
    if guard.refusal(url) is None:
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        assert parts.scheme.lower() in ("http", "https")
        assert (parts.hostname or "").rstrip(".") == "hooks.example.com"
        assert parts.username is None and parts.password is None
