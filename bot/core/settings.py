"""Settings: every environment variable the project reads, validated in one place.

Only start-up code calls `load_settings()` (the process environment, plus the file
`APPROVALS_ENV_FILE` names) or `load_settings(env)` (a mapping, for tests), and passes plain
values down; no other module reads `os.environ` (`bot.core.environment` reads it and the env
file for this one, and for the command hook's light path). A problem is one line of
`SettingsError` naming the variable; secrets are `SecretStr`, never echoed. The rules:
docs/ARCHITECTURE.md, "Settings".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import (
    BeforeValidator,
    Field,
    SecretStr,
    ValidationError,
    field_serializer,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from approvals._internal.slack_ids import CHANNEL_LETTERS, REVIEWER_LETTERS, is_user_group
from bot.core.environment import ENV_FILE_VARIABLE, SettingsError, environment

__all__ = ["ENV_FILE_VARIABLE", "Settings", "SettingsError", "load_settings"]

DEFAULT_SLACK_API_URL = "https://slack.com/api/"
DEFAULT_REDIS_URL = "redis://localhost:6379/0"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

#: A bot token: `xoxb-…`, or `xoxe.xoxb-…` when the app has token rotation on (Slack's "Using
#: token rotation": such a token expires after 12 hours; the bot does not refresh it). Only the
#: prefix and the characters are checked: Slack does not promise the rest of the format.
_BOT_TOKEN = re.compile(r"(?:xoxe\.)?xoxb-[A-Za-z0-9-]+")
#: An app-level token (`xapp-…`), which opens Socket Mode connections.
_APP_TOKEN = re.compile(r"xapp-[A-Za-z0-9-]+")
_NO_SPACE = re.compile(r"\S+")
_REVIEWER_ID = re.compile(rf"[{REVIEWER_LETTERS}][A-Z0-9]{{2,}}")
_CHANNEL_ID = re.compile(rf"[{CHANNEL_LETTERS}][A-Z0-9]{{2,}}")
_KEY_PREFIX = re.compile(r"[A-Za-z0-9_.:{}-]+")
_REDIS_SCHEMES = (
    "redis",
    "rediss",
    "unix",
    "redis+sentinel",
    "rediss+sentinel",
    "redis+cluster",
    "rediss+cluster",
)

#: Messages for pydantic's own error types (our validators raise their own text).
_MESSAGES = {
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be text",
}


class _SlackProblems(ValueError):
    """Raised by the cross-field check; carries its lines to `load_settings`."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        super().__init__("; ".join(lines))


def _slack_problems(bot_token: bool, signing_secret: bool, app_token: bool) -> list[str]:
    """Lines for a half-configured Slack: one per variable missing given the others."""
    if bot_token and not signing_secret and not app_token:
        return [
            "SLACK_SIGNING_SECRET: required when SLACK_BOT_TOKEN is set (HTTP mode); "
            "or set SLACK_APP_TOKEN for Socket Mode"
        ]
    if not bot_token and signing_secret and app_token:
        return ["SLACK_BOT_TOKEN: required when SLACK_SIGNING_SECRET and SLACK_APP_TOKEN are set"]
    if not bot_token and signing_secret:
        return ["SLACK_BOT_TOKEN: required when SLACK_SIGNING_SECRET is set (HTTP mode)"]
    if not bot_token and app_token:
        return ["SLACK_BOT_TOKEN: required when SLACK_APP_TOKEN is set (Socket Mode)"]
    return []


def _text(value: Any) -> Any:
    """Strip strings (and the text inside a SecretStr); leave anything else to pydantic."""
    if isinstance(value, SecretStr):
        return value.get_secret_value().strip()
    return value.strip() if isinstance(value, str) else value


def _split(value: Any) -> Any:
    """A comma-separated string as a tuple of its non-empty, stripped, distinct items."""
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if isinstance(value, str):
        value = value.split(",")
    if isinstance(value, list | tuple):
        items = [_text(item) for item in value]
        return tuple(dict.fromkeys(item for item in items if item))
    return value


def _require_http_url(value: str, example: str) -> None:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"must be an http(s) URL such as {example}")


def redact_url(url: str) -> str:
    """The URL with any password replaced by ``***`` (for log lines)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


# -- field checks (messages never include a secret's value) --
#
# Each field's check sits in its type. `_on_text(check)` strips the value and
# calls `check(text)`, which returns the value (normalised) or raises ValueError
# with the message of its line; input that is not text is left to pydantic.
# `_on_path` does the same for paths; `_port` and the comma lists take any input.


def _on_text(check: Callable[[str], Any]) -> BeforeValidator:
    """Strip the value and, if it is text, return `check(text)`."""

    def validate(value: Any) -> Any:
        value = _text(value)
        return check(value) if isinstance(value, str) else value

    return BeforeValidator(validate)


def _on_path(check: Callable[[Path], None]) -> BeforeValidator:
    """Strip the value; text or a Path becomes a Path with ``~`` expanded, then `check(path)`."""

    def validate(value: Any) -> Any:
        value = _text(value)
        if isinstance(value, str | Path):
            value = Path(value).expanduser()
            check(value)
        return value

    return BeforeValidator(validate)


def _no_spaces(value: str) -> str:
    if not _NO_SPACE.fullmatch(value):
        raise ValueError("must not contain spaces")
    return value


#: Slack's other kinds of token, by prefix: what a wrong one in a token variable is.
_OTHER_TOKENS = (
    ("xoxp-", "this is a user token (xoxp-), not the app's Bot User OAuth Token (xoxb-)"),
    ("xoxe-", "this is a refresh token (xoxe-), not an access token"),
    ("xoxa-", "this is a workspace app token (xoxa-), not the app's bot token (xoxb-)"),
    ("xoxc-", "this is a browser session token (xoxc-), not the app's bot token (xoxb-)"),
)


def _slack_token(
    kind: re.Pattern[str], message: str, *, other: tuple[str, ...], other_message: str
) -> Callable[[str], str]:
    """A check for one kind of Slack token that says where the other kind (prefixes `other`)
    belongs, and what a token of another kind, or pasted with `Bearer ` or quotes, is."""

    def check(value: str) -> str:
        if kind.fullmatch(value):
            return value
        if value.startswith(other):
            raise ValueError(other_message)
        if value[:7].lower() == "bearer " and kind.fullmatch(value[7:].strip()):
            raise ValueError("remove the 'Bearer ' in front of the token")
        quoted = len(value) > 1 and value[0] == value[-1] and value[0] in "\"'"
        if quoted and kind.fullmatch(value[1:-1].strip()):
            raise ValueError("remove the quotes around the token")
        for prefix, what in _OTHER_TOKENS:
            if value.startswith(prefix):
                raise ValueError(f"{message}: {what}")
        raise ValueError(message)

    return check


_bot_token = _slack_token(
    _BOT_TOKEN,
    "must be a bot token starting with xoxb-",
    other=("xapp-",),
    other_message="this is an app-level token (xapp-); put it in SLACK_APP_TOKEN",
)
_app_token = _slack_token(
    _APP_TOKEN,
    "must be an app-level token starting with xapp-",
    other=("xoxb-", "xoxe.xoxb-"),
    other_message="this is a bot token (xoxb-); put it in SLACK_BOT_TOKEN",
)


def _slack_api_url(value: str) -> str:
    _require_http_url(value, DEFAULT_SLACK_API_URL)
    return value if value.endswith("/") else value + "/"


def _approvals_url(value: str) -> str:
    _require_http_url(value, "http://localhost:3000")
    return value.rstrip("/")


def _redis_url(value: str) -> str:
    if urlsplit(value).scheme not in _REDIS_SCHEMES:
        raise ValueError(
            "must be a redis://, rediss://, unix://, redis+sentinel:// or redis+cluster:// URL, "
            f"e.g. {DEFAULT_REDIS_URL}"
        )
    return value


def _prefix(value: str) -> str:
    if not _KEY_PREFIX.fullmatch(value) or value.endswith(":"):
        raise ValueError(
            "must be letters, digits and _ . : { } - only, not ending in ':' "
            "(e.g. approvals or {approvals})"
        )
    return value


def _log_format(value: str) -> str:
    value = value.lower()
    from bot.core.logs import FORMATS

    if value not in FORMATS:
        raise ValueError(f"must be one of {', '.join(FORMATS)}")
    return value


def _log_level(value: str) -> str:
    value = value.upper()
    if value not in LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
    return value


def _channel(value: str) -> str:
    if not _CHANNEL_ID.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a channel id; use the id (e.g. C0123ABCDEF) from the "
            "channel's details, not its name"
        )
    return value


def default_data_dir() -> Path:
    """The platform's per-user state directory for approval-bot (`~/.local/state/approval-bot`
    on Linux, honouring XDG_STATE_HOME; `~/Library/Application Support/approval-bot` on macOS;
    `%LOCALAPPDATA%\\approval-bot` on Windows)."""
    import platformdirs

    return Path(platformdirs.user_state_dir("approval-bot", appauthor=False))


def _data_dir(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path} exists and is not a directory")


def _policy_file(path: Path) -> None:
    if not path.is_file():
        raise ValueError(f"no such file: {path}")


def _port(value: Any) -> Any:
    """Text must be an integer; any integer (text or not) must be a port number."""
    value = _text(value)
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise ValueError("must be an integer between 1 and 65535") from None
    if isinstance(value, int) and not isinstance(value, bool) and not 1 <= value <= 65535:
        raise ValueError("must be between 1 and 65535")
    return value


def _api_tokens(value: Any) -> Any:
    value = _split(value)
    if isinstance(value, tuple):
        for n, token in enumerate(value, 1):
            if isinstance(token, str) and not _NO_SPACE.fullmatch(token):
                raise ValueError(f"token {n} contains spaces (separate tokens with commas)")
    return value


def _reviewers(value: Any) -> Any:
    value = _split(value)
    if isinstance(value, tuple):
        bad = [
            item for item in value if not isinstance(item, str) or not _REVIEWER_ID.fullmatch(item)
        ]
        if bad:
            listed = ", ".join(repr(item) for item in bad)
            raise ValueError(
                f"{listed}: not a Slack user id (U…, W…) or user group id (S…); "
                "separate ids with commas"
            )
    return value


class Settings(BaseSettings):
    """The bot's configuration; attribute names are the variables' names in lower case."""

    model_config = SettingsConfigDict(
        case_sensitive=True,
        env_ignore_empty=True,
        env_file=None,
        extra="ignore",
        frozen=True,
        populate_by_name=True,
        hide_input_in_errors=True,
    )

    # Slack
    slack_bot_token: Annotated[SecretStr | None, _on_text(_bot_token)] = Field(
        None, validation_alias="SLACK_BOT_TOKEN"
    )
    slack_signing_secret: Annotated[SecretStr | None, _on_text(_no_spaces)] = Field(
        None, validation_alias="SLACK_SIGNING_SECRET"
    )
    slack_app_token: Annotated[SecretStr | None, _on_text(_app_token)] = Field(
        None, validation_alias="SLACK_APP_TOKEN"
    )
    slack_api_url: Annotated[str, _on_text(_slack_api_url)] = Field(
        DEFAULT_SLACK_API_URL, validation_alias="SLACK_API_URL"
    )
    #: Pace chat.postMessage per channel (~1/s); off only for benchmarks.
    approvals_slack_pacing: bool = Field(True, validation_alias="APPROVALS_SLACK_PACING")
    #: Seconds a SIGTERM waits for work in hand (parked calls are answered at once).
    approvals_shutdown_grace: float = Field(
        10.0, ge=0, le=300, validation_alias="APPROVALS_SHUTDOWN_GRACE"
    )

    # Serving and storage
    #: None = not set: `serve` may start the embedded server; see `redis_url_or_default`.
    redis_url: Annotated[str | None, _on_text(_redis_url)] = Field(
        None, validation_alias="REDIS_URL", repr=False
    )
    port: Annotated[int, BeforeValidator(_port)] = Field(3000, validation_alias="PORT")
    #: Key prefix in Redis (a `{hash tag}` keeps every key in one Cluster slot).
    approvals_prefix: Annotated[str, _on_text(_prefix)] = Field(
        "approvals", validation_alias="APPROVALS_PREFIX"
    )
    #: Where the embedded Redis keeps its data (append-only file), address and lock: the
    #: platform's per-user state directory unless set (so it does not depend on the cwd).
    approvals_data_dir: Annotated[Path, _on_path(_data_dir)] = Field(
        default_factory=lambda: default_data_dir(), validation_alias="APPROVALS_DATA_DIR"
    )
    log_level: Annotated[str, _on_text(_log_level)] = Field("INFO", validation_alias="LOG_LEVEL")
    #: `text` (one escaped line per record) or `json` (one JSON object per line).
    log_format: Annotated[str, _on_text(_log_format)] = Field("text", validation_alias="LOG_FORMAT")

    # Who may call, who decides, where it goes
    approvals_api_tokens: Annotated[
        tuple[SecretStr, ...], NoDecode, BeforeValidator(_api_tokens)
    ] = Field((), validation_alias="APPROVALS_API_TOKENS")
    approvals_admin_tokens: Annotated[
        tuple[SecretStr, ...], NoDecode, BeforeValidator(_api_tokens)
    ] = Field((), validation_alias="APPROVALS_ADMIN_TOKENS")
    approvals_default_channel: Annotated[str | None, _on_text(_channel)] = Field(
        None, validation_alias="APPROVALS_DEFAULT_CHANNEL"
    )
    approvals_reviewers: Annotated[tuple[str, ...], NoDecode, BeforeValidator(_reviewers)] = Field(
        (), validation_alias="APPROVALS_REVIEWERS"
    )
    approvals_policy_file: Annotated[Path | None, _on_path(_policy_file)] = Field(
        None, validation_alias="APPROVALS_POLICY_FILE"
    )

    # For the CLI and hooks talking to a remote bot
    approvals_url: Annotated[str | None, _on_text(_approvals_url)] = Field(
        None, validation_alias="APPROVALS_URL"
    )
    approvals_token: Annotated[SecretStr | None, _on_text(_no_spaces)] = Field(
        None, validation_alias="APPROVALS_TOKEN"
    )

    # For `approval-bot setup codex`: where Codex keeps hooks.json and config.toml
    codex_home: Annotated[Path | None, _on_path(lambda _: None)] = Field(
        None, validation_alias="CODEX_HOME"
    )

    @property
    def codex_home_or_default(self) -> Path:
        return self.codex_home or Path.home() / ".codex"

    # -- cross-field check --

    @model_validator(mode="after")
    def _slack_complete(self) -> Settings:
        problems = _slack_problems(
            self.slack_bot_token is not None,
            self.slack_signing_secret is not None,
            self.slack_app_token is not None,
        )
        if problems:
            raise _SlackProblems(problems)
        return self

    @field_serializer("redis_url", when_used="json")
    def _redis_url_json(self, value: str | None) -> str | None:
        return None if value is None else redact_url(value)

    # -- derived values --

    @property
    def slack_configured(self) -> bool:
        """Any Slack variable is set (validation guarantees the set is then complete)."""
        return any((self.slack_bot_token, self.slack_signing_secret, self.slack_app_token))

    @property
    def socket_mode(self) -> bool:
        """Slack through Socket Mode (SLACK_APP_TOKEN set) rather than HTTP."""
        return self.slack_app_token is not None

    @property
    def redis_url_or_default(self) -> str:
        return self.redis_url or DEFAULT_REDIS_URL

    @property
    def redis_url_redacted(self) -> str:
        """`redis_url_or_default` with its password hidden, for log lines."""
        return redact_url(self.redis_url_or_default)

    @property
    def reviewer_users(self) -> tuple[str, ...]:
        """The user ids (U…, W…) among APPROVALS_REVIEWERS."""
        return tuple(r for r in self.approvals_reviewers if not is_user_group(r))

    @property
    def reviewer_groups(self) -> tuple[str, ...]:
        """The user group ids (S…) among APPROVALS_REVIEWERS."""
        return tuple(r for r in self.approvals_reviewers if is_user_group(r))


#: Every variable `Settings` reads (its fields' aliases).
VARIABLES: tuple[str, ...] = tuple(
    str(field.validation_alias) for field in Settings.model_fields.values()
)
_DEFAULTS: dict[str, Any] = {
    str(field.validation_alias): field.default for field in Settings.model_fields.values()
}


def _problems(error: ValidationError, values: Mapping[str, str]) -> list[str]:
    lines: list[str] = []
    slack_checked = False
    for err in error.errors(include_url=False, include_input=False):
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, _SlackProblems):
            lines.extend(cause.lines)
            slack_checked = True
            continue
        name = str(err["loc"][0]) if err["loc"] else "configuration"
        if isinstance(cause, ValueError):
            message = str(cause)
        else:
            message = _MESSAGES.get(err["type"], err["msg"])
        lines.append(f"{name}: {message}")
    if not slack_checked:
        # The cross-field check does not run when a field failed; report it anyway.
        lines.extend(
            _slack_problems(
                "SLACK_BOT_TOKEN" in values,
                "SLACK_SIGNING_SECRET" in values,
                "SLACK_APP_TOKEN" in values,
            )
        )
    return list(dict.fromkeys(lines))


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """The settings from `env` (default: the process environment, plus APPROVALS_ENV_FILE).

    Raises `SettingsError` listing every problem, one line each, naming the variable.
    """
    source = environment(env)
    values = {
        name: value.strip()
        for name in VARIABLES
        if (value := source.get(name)) is not None and value.strip()
    }
    try:
        # Every field is given (its default when unset), so pydantic-settings' own
        # sources, which read os.environ, can never contribute: `env` is the whole input.
        return Settings(**{**_DEFAULTS, **values})
    except ValidationError as e:
        # `from None`: the message lists every problem; the pydantic chain adds only noise.
        raise SettingsError(_problems(e, values)) from None
