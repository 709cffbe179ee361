"""Tests for bot.core.settings (the environment) and the Slack app manifests shipped in config/."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr

from bot.core.settings import (
    DEFAULT_REDIS_URL,
    DEFAULT_SLACK_API_URL,
    VARIABLES,
    Settings,
    SettingsError,
    default_data_dir,
    load_settings,
    redact_url,
)
from tests.support.credentials import (
    API_TOKEN,
    APP_TOKEN,
    BOT_TOKEN,
    OTHER_API_TOKEN,
    REFRESH_TOKEN,
    ROTATING_BOT_TOKEN,
    SIGNING_SECRET,
    THIRD_API_TOKEN,
    USER_TOKEN,
)

BOT, APP, SIGNING = BOT_TOKEN, APP_TOKEN, SIGNING_SECRET
HTTP_SLACK = {"SLACK_BOT_TOKEN": BOT, "SLACK_SIGNING_SECRET": SIGNING}


def spaced(secret: str) -> str:
    """`secret` with a space in its middle (a paste gone wrong): refused, and never shown."""
    return f"{secret[:16]} {secret[16:]}"


def problems(env: dict[str, str]) -> tuple[str, ...]:
    with pytest.raises(SettingsError) as info:
        load_settings(env)
    return info.value.problems


# -- defaults and parsing --


def test_defaults_with_an_empty_environment() -> None:
    s = load_settings({})
    assert s.slack_bot_token is None
    assert s.slack_signing_secret is None
    assert s.slack_app_token is None
    assert s.slack_api_url == DEFAULT_SLACK_API_URL == "https://slack.com/api/"
    assert s.redis_url is None
    assert s.redis_url_or_default == DEFAULT_REDIS_URL == "redis://localhost:6379/0"
    assert s.port == 3000
    assert s.approvals_api_tokens == ()
    assert s.approvals_default_channel is None
    assert s.approvals_reviewers == ()
    assert s.approvals_policy_file is None
    assert s.approvals_prefix == "approvals"
    assert s.approvals_data_dir == default_data_dir() and s.approvals_data_dir.is_absolute()
    assert s.approvals_url is None
    assert s.approvals_token is None
    assert s.approvals_slack_pacing is True
    assert s.log_level == "INFO"
    assert s.slack_configured is False
    assert s.socket_mode is False


def test_every_variable_of_the_design_table_is_read() -> None:
    design = {
        "SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN", "SLACK_API_URL",
        "REDIS_URL", "PORT", "APPROVALS_API_TOKENS", "APPROVALS_DEFAULT_CHANNEL",
        "APPROVALS_REVIEWERS", "APPROVALS_POLICY_FILE",
    }  # fmt: skip
    assert design <= set(VARIABLES)


def test_values_are_parsed_and_stripped(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("routes: []\n")
    s = load_settings(
        {
            "PORT": " 8080 ",
            "REDIS_URL": "redis://db.internal:6380/2",
            "APPROVALS_DEFAULT_CHANNEL": "C0123ABCDEF",
            "APPROVALS_POLICY_FILE": str(policy),
            "APPROVALS_PREFIX": "{staging}",
            "APPROVALS_DATA_DIR": str(tmp_path / "data"),
            "APPROVALS_SLACK_PACING": "off",
            "LOG_LEVEL": "debug",
            "APPROVALS_URL": "https://approvals.example.com/",
            "APPROVALS_TOKEN": "client-token",
        }
    )
    assert s.port == 8080
    assert s.redis_url == s.redis_url_or_default == "redis://db.internal:6380/2"
    assert s.approvals_default_channel == "C0123ABCDEF"
    assert s.approvals_policy_file == policy
    assert s.approvals_prefix == "{staging}"
    assert s.approvals_data_dir == tmp_path / "data"
    assert s.approvals_slack_pacing is False
    assert s.log_level == "DEBUG"
    assert s.approvals_url == "https://approvals.example.com"
    assert s.approvals_token is not None
    assert s.approvals_token.get_secret_value() == "client-token"


def test_comma_separated_tokens_become_secrets_without_blanks_or_duplicates() -> None:
    s = load_settings({"APPROVALS_API_TOKENS": " tok-one, tok-two,,tok-one , "})
    assert all(isinstance(t, SecretStr) for t in s.approvals_api_tokens)
    assert [t.get_secret_value() for t in s.approvals_api_tokens] == ["tok-one", "tok-two"]


def test_comma_separated_reviewers_split_into_users_and_groups() -> None:
    s = load_settings({"APPROVALS_REVIEWERS": "U01ALICE, W02BOB,S03OPS,,U01ALICE"})
    assert s.approvals_reviewers == ("U01ALICE", "W02BOB", "S03OPS")
    assert s.reviewer_users == ("U01ALICE", "W02BOB")
    assert s.reviewer_groups == ("S03OPS",)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://127.0.0.1:8765/api", "http://127.0.0.1:8765/api/"),
        ("http://127.0.0.1:8765/api/", "http://127.0.0.1:8765/api/"),
        ("https://slack.com/api", "https://slack.com/api/"),
    ],
)
def test_slack_api_url_always_ends_with_a_slash(given: str, expected: str) -> None:
    assert load_settings({"SLACK_API_URL": given}).slack_api_url == expected


def test_blank_values_count_as_unset() -> None:
    s = load_settings({name: "  " for name in VARIABLES})
    assert s == load_settings({})
    assert s.port == 3000
    assert s.slack_configured is False


def test_an_explicit_mapping_ignores_the_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PORT", "not-a-port")
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT)
    monkeypatch.setenv("APPROVALS_REVIEWERS", "U01ALICE")
    s = load_settings({})
    assert s.port == 3000
    assert s.slack_bot_token is None
    assert s.approvals_reviewers == ()


def test_without_a_mapping_the_process_environment_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("APPROVALS_ENV_FILE", raising=False)
    monkeypatch.setenv("PORT", "4321")
    monkeypatch.setenv("APPROVALS_REVIEWERS", "U01ALICE,S03OPS")
    s = load_settings()
    assert s.port == 4321
    assert s.approvals_reviewers == ("U01ALICE", "S03OPS")


def test_settings_constructed_directly_parse_the_environment_the_same_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = {
        "PORT": "4321",
        "APPROVALS_REVIEWERS": "U01ALICE, S03OPS",
        "APPROVALS_API_TOKENS": "a-token,b-token",
        "SLACK_API_URL": "http://127.0.0.1:9/api",
        "APPROVALS_SLACK_PACING": "false",
    }
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    direct = Settings()
    assert direct == load_settings(env)
    assert direct.approvals_reviewers == ("U01ALICE", "S03OPS")
    assert direct.slack_api_url == "http://127.0.0.1:9/api/"


def test_env_file_is_read_only_when_named_and_the_environment_wins(tmp_path: Path) -> None:
    env_file = tmp_path / "bot.env"
    env_file.write_text(f"PORT=5000\nSLACK_BOT_TOKEN={BOT}\nSLACK_SIGNING_SECRET={SIGNING}\n")
    s = load_settings({"APPROVALS_ENV_FILE": str(env_file), "PORT": "6000"})
    assert s.port == 6000
    assert s.slack_bot_token is not None
    assert s.slack_bot_token.get_secret_value() == BOT
    assert s.slack_configured is True


def test_an_unreadable_env_file_is_one_line_without_its_content(tmp_path: Path) -> None:
    env_file = tmp_path / "bot.env"
    env_file.write_bytes(f"SLACK_BOT_TOKEN={BOT}\nPORT=\xff\n".encode("latin-1"))
    (line,) = problems({"APPROVALS_ENV_FILE": str(env_file)})
    assert line.startswith("APPROVALS_ENV_FILE: cannot read") and "UTF-8" in line
    assert BOT not in line


def test_a_missing_env_file_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.env"
    assert problems({"APPROVALS_ENV_FILE": str(missing)}) == (
        f"APPROVALS_ENV_FILE: no such file: {missing}",
    )


# -- errors: one line per problem, naming the variable --


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ({"PORT": "0"}, "PORT: must be between 1 and 65535"),
        ({"PORT": "65536"}, "PORT: must be between 1 and 65535"),
        ({"PORT": "http"}, "PORT: must be an integer between 1 and 65535"),
        ({"SLACK_API_URL": "slack.com/api"}, "SLACK_API_URL: must be an http(s) URL"),
        ({"REDIS_URL": "localhost:6379"}, "REDIS_URL: must be a redis://, rediss://"),
        ({"APPROVALS_URL": "ftp://bot"}, "APPROVALS_URL: must be an http(s) URL"),
        ({"APPROVALS_REVIEWERS": "U01ALICE,bob"}, "APPROVALS_REVIEWERS: 'bob': not a Slack"),
        ({"APPROVALS_REVIEWERS": "C0123"}, "APPROVALS_REVIEWERS: 'C0123': not a Slack user id"),
        ({"APPROVALS_DEFAULT_CHANNEL": "#ops"}, "APPROVALS_DEFAULT_CHANNEL: '#ops' is not a"),
        ({"APPROVALS_POLICY_FILE": "/nonexistent/p.yaml"}, "APPROVALS_POLICY_FILE: no such file"),
        ({"APPROVALS_PREFIX": "my prefix"}, "APPROVALS_PREFIX: must be letters"),
        ({"APPROVALS_PREFIX": "approvals:"}, "APPROVALS_PREFIX: must be letters"),
        ({"APPROVALS_SLACK_PACING": "maybe"}, "APPROVALS_SLACK_PACING: must be true or false"),
        ({"LOG_LEVEL": "loud"}, "LOG_LEVEL: must be one of DEBUG, INFO, WARNING"),
        ({"APPROVALS_API_TOKENS": "one two"}, "APPROVALS_API_TOKENS: token 1 contains spaces"),
        ({"SLACK_BOT_TOKEN": USER_TOKEN, "SLACK_SIGNING_SECRET": SIGNING}, "SLACK_BOT_TOKEN: must"),
        ({"SLACK_BOT_TOKEN": APP, "SLACK_SIGNING_SECRET": SIGNING}, "SLACK_BOT_TOKEN: this is an"),
        ({"SLACK_BOT_TOKEN": BOT, "SLACK_APP_TOKEN": USER_TOKEN}, "SLACK_APP_TOKEN: must be an"),
        ({"SLACK_BOT_TOKEN": BOT, "SLACK_APP_TOKEN": BOT}, "SLACK_APP_TOKEN: this is a bot"),
        ({**HTTP_SLACK, "SLACK_SIGNING_SECRET": spaced(SIGNING)}, "SLACK_SIGNING_SECRET: must not"),
    ],
)
def test_each_bad_value_gives_one_line_naming_its_variable(env: dict[str, str], line: str) -> None:
    found = problems(env)
    assert len(found) == 1, found
    assert found[0].startswith(line)


@pytest.mark.parametrize(
    ("name", "value", "line"),
    [
        ("SLACK_BOT_TOKEN", USER_TOKEN, "must be a bot token starting with xoxb-: this is a user"),
        (
            "SLACK_BOT_TOKEN",
            REFRESH_TOKEN,
            "must be a bot token starting with xoxb-: this is a refresh",
        ),
        ("SLACK_BOT_TOKEN", f"Bearer {BOT}", "remove the 'Bearer ' in front of the token"),
        ("SLACK_BOT_TOKEN", f"'{BOT}'", "remove the quotes around the token"),
        ("SLACK_BOT_TOKEN", BOT.replace("-", "_"), "must be a bot token starting with xoxb-"),
        ("SLACK_BOT_TOKEN", "•" * 6 + "(32-63 chars)", "must be a bot token starting with xoxb-"),
        ("SLACK_APP_TOKEN", ROTATING_BOT_TOKEN, "this is a bot token (xoxb-); put it in"),
        ("SLACK_APP_TOKEN", f'"{APP}"', "remove the quotes around the token"),
    ],
)
def test_a_wrong_slack_token_says_what_it_is(name: str, value: str, line: str) -> None:
    env = {"SLACK_BOT_TOKEN": BOT, "SLACK_APP_TOKEN": APP, name: value}
    found = problems(env)
    assert len(found) == 1 and found[0].startswith(f"{name}: {line}"), found
    assert value not in found[0] and BOT not in found[0]


@pytest.mark.parametrize("token", [BOT, ROTATING_BOT_TOKEN])
def test_real_bot_token_shapes_are_taken_as_they_are(token: str) -> None:
    """Slack's bot tokens: `xoxb-…`, and `xoxe.xoxb-…` when the app has token rotation on."""
    s = load_settings({"SLACK_BOT_TOKEN": f"  {token}\n", "SLACK_APP_TOKEN": APP})
    assert s.slack_bot_token is not None and s.slack_bot_token.get_secret_value() == token


def test_a_data_dir_that_is_a_file_is_an_error(tmp_path: Path) -> None:
    file = tmp_path / "data"
    file.write_text("")
    assert problems({"APPROVALS_DATA_DIR": str(file)}) == (
        f"APPROVALS_DATA_DIR: {file} exists and is not a directory",
    )


def test_several_problems_are_all_reported_one_line_each() -> None:
    with pytest.raises(SettingsError) as info:
        load_settings({"PORT": "0", "LOG_LEVEL": "loud", "SLACK_BOT_TOKEN": BOT})
    lines = str(info.value).splitlines()
    assert lines == list(info.value.problems)
    assert sorted(line.split(":")[0] for line in lines) == [
        "LOG_LEVEL",
        "PORT",
        "SLACK_SIGNING_SECRET",
    ]


# -- Slack: complete, absent, or half-configured --


@pytest.mark.parametrize(
    ("env", "line"),
    [
        (
            {"SLACK_BOT_TOKEN": BOT},
            "SLACK_SIGNING_SECRET: required when SLACK_BOT_TOKEN is set (HTTP mode)",
        ),
        (
            {"SLACK_SIGNING_SECRET": SIGNING},
            "SLACK_BOT_TOKEN: required when SLACK_SIGNING_SECRET is set",
        ),
        (
            {"SLACK_APP_TOKEN": APP},
            "SLACK_BOT_TOKEN: required when SLACK_APP_TOKEN is set (Socket Mode)",
        ),
        (
            {"SLACK_APP_TOKEN": APP, "SLACK_SIGNING_SECRET": SIGNING},
            "SLACK_BOT_TOKEN: required when SLACK_SIGNING_SECRET and SLACK_APP_TOKEN are set",
        ),
    ],
)
def test_half_configured_slack_is_an_error(env: dict[str, str], line: str) -> None:
    found = problems(env)
    assert len(found) == 1, found
    assert found[0].startswith(line)


def test_half_configured_slack_is_reported_beside_other_problems() -> None:
    assert set(problems({"SLACK_APP_TOKEN": APP, "PORT": "-1"})) == {
        "PORT: must be between 1 and 65535",
        "SLACK_BOT_TOKEN: required when SLACK_APP_TOKEN is set (Socket Mode)",
    }


def test_no_slack_at_all_is_fine() -> None:
    s = load_settings({"APPROVALS_API_TOKENS": API_TOKEN})
    assert s.slack_configured is False
    assert s.socket_mode is False


def test_http_mode() -> None:
    s = load_settings(HTTP_SLACK)
    assert s.slack_configured is True
    assert s.socket_mode is False


@pytest.mark.parametrize("signing", [None, SIGNING])
def test_socket_mode(signing: str | None) -> None:
    env = {"SLACK_BOT_TOKEN": BOT, "SLACK_APP_TOKEN": APP}
    if signing:
        env["SLACK_SIGNING_SECRET"] = signing
    s = load_settings(env)
    assert s.slack_configured is True
    assert s.socket_mode is True
    assert s.slack_app_token is not None
    assert s.slack_app_token.get_secret_value() == APP


# -- secrets stay secret --

SECRETS = {
    **HTTP_SLACK,
    "SLACK_APP_TOKEN": APP,
    "APPROVALS_API_TOKENS": f"{API_TOKEN},{OTHER_API_TOKEN}",
    "APPROVALS_TOKEN": THIRD_API_TOKEN,
    "REDIS_URL": "redis://default:rediss3kr1tpw@db:6379/0",
}


def pieces(values: dict[str, str]) -> set[str]:
    """Every piece of a secret in `values` long enough to tell (the redis URL's aside)."""
    return {
        piece
        for name, value in values.items()
        if name != "REDIS_URL"
        for piece in value.replace(",", " ").split()
        if len(piece) >= 8
    }


def test_secrets_are_not_in_repr_str_or_json() -> None:
    s = load_settings(SECRETS)
    shown = repr(s) + str(s) + s.model_dump_json() + s.redis_url_redacted
    assert "s3kr1t" not in shown
    assert [p for p in pieces(SECRETS) if p in shown] == []
    assert s.redis_url_redacted == "redis://default:***@db:6379/0"


def test_secrets_are_not_in_errors_or_their_tracebacks() -> None:
    bad = {
        "SLACK_BOT_TOKEN": USER_TOKEN,
        "SLACK_APP_TOKEN": BOT,
        "SLACK_SIGNING_SECRET": spaced(SIGNING),
        "APPROVALS_API_TOKENS": f"{spaced(API_TOKEN)},{OTHER_API_TOKEN}",
        "APPROVALS_TOKEN": spaced(THIRD_API_TOKEN),
        "REDIS_URL": "http://user:rediss3kr1tpw@db",
    }
    with pytest.raises(SettingsError) as info:
        load_settings(bad)
    assert len(info.value.problems) == len(bad)
    text = "".join(traceback.format_exception(info.value)) + repr(info.value)
    assert "s3kr1t" not in text
    assert [p for p in pieces(bad) if p in text] == []
    assert info.value.__cause__ is None


def test_redact_url_leaves_urls_without_a_password_alone() -> None:
    assert redact_url("redis://localhost:6379/0") == "redis://localhost:6379/0"
    assert redact_url("rediss://:pw@host:6380/1") == "rediss://:***@host:6380/1"


# -- the Slack app manifests --

SCOPES = [
    "channels:history",
    "chat:write",
    "commands",
    "groups:history",
    "im:write",
    "usergroups:read",
]
CONFIG = Path(__file__).resolve().parents[3] / "config"


def manifest(name: str) -> Any:
    data = yaml.safe_load((CONFIG / name).read_text())
    assert isinstance(data, dict)
    return data


def test_http_manifest() -> None:
    m = manifest("slack-manifest.yaml")
    assert sorted(m["oauth_config"]["scopes"]["bot"]) == SCOPES
    settings = m["settings"]
    assert settings["socket_mode_enabled"] is False
    assert settings["interactivity"] == {
        "is_enabled": True,
        "request_url": "https://YOUR-HOST/slack/events",
    }
    assert m["features"]["bot_user"]["display_name"]
    assert len(m["display_information"]["name"]) <= 35
    assert settings["event_subscriptions"] == {
        "request_url": "https://YOUR-HOST/slack/events",
        "bot_events": ["app_home_opened"],
    }
    assert m["features"]["app_home"]["home_tab_enabled"] is True
    (command,) = m["features"]["slash_commands"]
    assert command["command"] == "/approvals"
    assert command["url"] == "https://YOUR-HOST/slack/events"


def test_socket_mode_manifest() -> None:
    m = manifest("slack-manifest-socket.yaml")
    assert sorted(m["oauth_config"]["scopes"]["bot"]) == SCOPES
    settings = m["settings"]
    assert settings["socket_mode_enabled"] is True
    assert settings["event_subscriptions"] == {"bot_events": ["app_home_opened"]}
    assert [c["command"] for c in m["features"]["slash_commands"]] == ["/approvals"]
    assert "url" not in m["features"]["slash_commands"][0]
    assert settings["interactivity"] == {"is_enabled": True}
    http = manifest("slack-manifest.yaml")
    # The same features, but for the slash command's URL (Socket Mode has none).
    commands = [
        {k: v for k, v in c.items() if k != "url"} for c in http["features"]["slash_commands"]
    ]
    assert m["features"] == {**http["features"], "slash_commands": commands}
    assert m["display_information"] == http["display_information"]


def test_the_default_data_dir_is_the_per_user_state_dir_not_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    assert load_settings({}).approvals_data_dir == tmp_path / "state" / "approval-bot"
    assert load_settings({"APPROVALS_DATA_DIR": "/srv/data"}).approvals_data_dir == Path(
        "/srv/data"
    )
