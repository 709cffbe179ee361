"""The secret rules: every pattern that recognises a secret in text, and the text normaliser.

One module, one corpus (`tests/support/secret_corpus.py`: generated fakes and near
misses for every rule). `find(text)` returns the spans of secrets in text that
`normalise` already made comparable (NFKC per character, format characters
such as zero-width spaces removed); `bot.masking.masker` maps them back onto the
original text and masks them.

Why our own rules: Yelp's `detect-secrets` (last release 2024-05) and IBM's
maintained fork `bc-detect-secrets` were measured on the corpus
(`bench/bench_masking.py`): their regex plugins found 53 and 36 of 159 fakes,
their entropy plugins flag ordinary prose in a single line, and they return
values rather than spans. Their provider prefixes informed the list below.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

Span = tuple[int, int, str]


@dataclass(frozen=True)
class Rule:
    """A named pattern; the secret is group `secret` when the pattern has one, else the match.

    A rule whose secret is read by a scan that may fail far from where it began has two
    parts, so that it runs in linear time: `pattern` finds only where a secret may begin (a
    key, a command, a scheme; cheap, bounded by the run of characters it reads), and `tail`,
    matched right after it, reads the rest. A key `check` refuses costs no scan of its
    value; a `tail` that fails resumes the search past what `skip` matches there, since
    every later beginning it passes would fail the same way (a URL's credentials in the
    rest of its word, a command's flag in the rest of its command). Their match is then
    `pattern`'s start to `tail`'s end; groups come from either."""

    name: str
    pattern: re.Pattern[str]
    check: Callable[[str], bool] | None = None
    #: Lower-case strings one of which a text must hold for the rule to run (speed only).
    hints: tuple[str, ...] = ()
    tail: re.Pattern[str] | None = None
    skip: re.Pattern[str] | None = None


def _mixed(value: str) -> bool:
    """At least one upper-case letter, one lower-case letter and one digit."""
    return (
        any(c.isupper() for c in value)
        and any(c.islower() for c in value)
        and any(c.isdigit() for c in value)
    )


def _basic_credentials(value: str) -> bool:
    try:
        return b":" in base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False


def _secretish(value: str) -> bool:
    """A word after `password`/`token` in prose is a secret only if it does not read as a word."""
    value = value.strip("\"'`.,;:()[]{}")
    if len(value) < 6 or value.startswith(("&lt;", "&gt;", "&amp;", "<")):
        return False  # a redirection or an escaped one, not a value
    has_digit = any(c.isdigit() for c in value)
    has_symbol = any(not c.isalnum() for c in value)
    has_inner_upper = any(c.isupper() for c in value[1:])
    return has_digit or has_symbol or has_inner_upper


_B = r"(?<![A-Za-z0-9])"  # no letter or digit before (`_` may glue a token on: `deploy_ghp_…`)
_E = r"(?![A-Za-z0-9_])"  # no identifier character after


def _token(
    name: str,
    *alternatives: str,
    check: Callable[[str], bool] | None = None,
    hints: tuple[str, ...] = (),
) -> Rule:
    """A rule matching a whole token (not inside a longer identifier); its hints are the
    alternatives' literal prefixes unless given."""
    body = "|".join(alternatives)
    prefixes = tuple(_literal_prefix(a).lower() for a in alternatives)
    hints = hints or (() if "" in prefixes else prefixes)
    return Rule(name, re.compile(rf"{_B}(?:{body})"), check, hints)


def _literal_prefix(pattern: str) -> str:
    """The literal text a pattern starts with (`ghp_` of `ghp_[A-Z]+`, `ya29.` of `ya29\\.`)."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern) and pattern[i + 1] in ".-$":
            out.append(pattern[i + 1])
            i += 2
        elif ch.isalnum() or ch in "_-":
            out.append(ch)
            i += 1
        else:
            break
    if i < len(pattern) and pattern[i] in "?*{" and out:
        out.pop()  # the last character is optional or repeated
    return "".join(out)


#: Key names: a segment equal to a weak term, or ending in a strong one, makes a key secret.
_STRONG: tuple[str, ...] = (
    "password", "passwd", "passphrase", "passcode", "secret", "secrets", "token", "tokens",
    "apikey", "credential", "credentials", "cookie", "privatekey", "authorization",
)  # fmt: skip
_WEAK = frozenset({"pass", "pw", "pwd", "auth", "creds", "sig", "signature", "dsn", "otp"})
#: `<x>_key` is a secret unless x says it is not (`public_key`, `primary_key`, …).
_KEY_NOT_SECRET = frozenset(
    {
        "public", "primary", "foreign", "sort", "partition", "cache", "idempotency", "object",
        "row", "lookup", "hash", "range", "group", "routing", "dedup", "dedupe", "unique",
        "composite", "index", "bucket", "s3", "map", "dict", "ssh_public", "pub", "host",
        "kms", "license", "sorting", "shard", "message", "event", "idem", "natural", "join",
    }
)  # fmt: skip
#: A last segment that makes `password_policy` or `token_url` a setting, not a secret.
_BENIGN_SUFFIX = frozenset(
    {
        "policy", "policies", "length", "len", "min", "max", "url", "uri", "endpoint", "file",
        "path", "dir", "name", "id", "type", "expiry", "expires", "ttl", "timeout", "reset",
        "required", "enabled", "strength", "rotation", "format", "prompt", "label", "hint",
        "field", "count", "age", "scope", "scopes", "env", "var", "hash", "manager", "store",
        "provider", "ref", "arn", "version", "usage", "limit", "rules", "validator", "regex",
    }
)  # fmt: skip
_SEGMENT = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def key_segments(name: str) -> list[str]:
    """`DB_PASSWORD` → [db, password]; `clientSecret` → [client, secret]."""
    return [s.lower() for part in re.split(r"[^A-Za-z0-9]+", name) for s in _SEGMENT.findall(part)]


@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """Whether a key or argument named `name` holds a secret (after normalising it). Pure:
    recent answers are cached (argument names repeat from request to request)."""
    segments = key_segments(normalise(name)[0])
    if not segments:
        return False
    joined = "".join(segments)
    if joined in ("apikey", "privatekey", "accesskey", "secretkey", "signingkey", "sessionkey"):
        return True
    last = segments[-1]
    if last in _WEAK or last.endswith(_STRONG):
        return True
    if last == "key" and len(segments) > 1:
        owner = "_".join(segments[:-1])
        return owner not in _KEY_NOT_SECRET and segments[-2] not in _KEY_NOT_SECRET
    if last in _BENIGN_SUFFIX:
        return False
    return any(s in _WEAK or s.endswith(_STRONG) for s in segments[:-1])


_KEY_CHARS = r"[A-Za-z0-9_.\-]"
_VALUE = r"(?P<secret>\"(?:[^\"\\\n]|\\.)+\"?|'(?:[^'\\\n]|\\.)+'?|[^\s&\"';<]+)"


#: The rest of a shell command: to the next line, `;`, `|` or `&`.
_COMMAND_REST = re.compile(r"[^\n;|&]*")

RULES: tuple[Rule, ...] = (
    # -- PEM blocks, to their END line or the end of the text
    Rule(
        "pem_private_key",
        re.compile(
            r"(?P<secret>-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----.*?"
            r"(?:-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|\Z))",
            re.DOTALL,
        ),
        hints=("private key",),
    ),
    # -- user:password@ in any URL; the password may hold `@`, `/` and `:`
    # (The last `@` of the word ends it; a scheme starts a run of scheme characters.)
    Rule(
        "url_credentials",
        # (dots or dashes glued before the scheme are no part of it: `…redis://` as a
        # clipped text starts)
        re.compile(r"(?<![A-Za-z0-9+.\-])[+.\-]*[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@]*:"),
        hints=("://",),
        tail=re.compile(r"(?P<secret>[^\s]+?)@(?=[^\s@]*(?:[\s\"'`<>]|\Z))"),
        skip=re.compile(r"\S*"),
    ),
    # -- cloud
    _token(
        "aws_access_key_id",
        r"AKIA[A-Z0-9]{16}" + _E,
        r"ASIA[A-Z0-9]{16}" + _E,
        r"ABIA[A-Z0-9]{16}" + _E,
        r"ACCA[A-Z0-9]{16}" + _E,
    ),
    Rule(
        "aws_secret_key",
        re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"),
        _mixed,
    ),
    _token("google_api_key", r"AIza[0-9A-Za-z_\-]{35}"),
    _token("google_oauth", r"GOCSPX-[A-Za-z0-9_\-]{20,}", r"ya29\.[A-Za-z0-9_\-.]{20,}"),
    _token("google_oauth", r"1//0[A-Za-z0-9_\-]{30,}", hints=("1//0",)),  # a refresh token
    Rule("azure_storage_key", re.compile(r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{86}=="), _mixed),
    _token("digitalocean_token", r"do[opr]_v1_[a-f0-9]{64}"),
    _token(
        "hashicorp_vault",
        r"hv[sbr]\.[A-Za-z0-9_\-]{20,}",
        r"[a-z0-9]{14}\.atlasv1\.[\w\-]{30,}",
        hints=("hvs.", "hvb.", "hvr.", ".atlasv1."),
    ),
    _token("databricks_token", r"dapi[a-f0-9]{32}(?:-\d)?" + _E),
    # -- version control
    _token("github_token", r"gh[pousr]_[A-Za-z0-9]{20,}", r"github_pat_[A-Za-z0-9_]{20,}"),
    _token(
        "gitlab_token",
        r"gl(?:pat|dt|ptt|rt|soat|ffct|cbt|imt|oas|agent)-[A-Za-z0-9_\-]{20,}",
        r"GR1348941[A-Za-z0-9_\-]{20,}",
    ),
    _token("atlassian_token", r"ATBB[A-Za-z0-9_=.\-]{28,}", r"ATATT[A-Za-z0-9_=\-]{20,}"),
    # -- package registries
    _token("npm_token", r"npm_[A-Za-z0-9]{36}" + _E),
    _token("pypi_token", r"pypi-AgE[A-Za-z0-9_\-]{40,}"),
    _token("rubygems_token", r"rubygems_[a-f0-9]{48}"),
    _token("docker_token", r"dckr_pat_[A-Za-z0-9_\-]{20,}"),
    _token("nuget_key", r"oy2[a-z0-9]{43}" + _E),
    _token("crates_token", r"cio[A-Za-z0-9]{32}" + _E),
    # -- payment
    _token("stripe_key", r"[rs]k_(?:live|test)_[A-Za-z0-9]{10,}", hints=("k_live_", "k_test_")),
    _token("stripe_webhook_secret", r"whsec_[A-Za-z0-9+/=]{20,}"),
    _token("square_token", r"sq0(?:atp|csp|idp)-[A-Za-z0-9_\-]{22,}", r"EAAA[A-Za-z0-9_\-]{55,}"),
    Rule(
        "braintree_token",
        re.compile(r"access_token\$(?:production|sandbox)\$[a-z0-9]{16}\$[a-f0-9]{32}"),
        hints=("access_token$",),
    ),
    _token("shopify_token", r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}"),
    # -- AI APIs
    _token("openai_key", r"sk-(?:[A-Za-z0-9]+-){0,2}[A-Za-z0-9_\-]{20,}"),
    _token("huggingface_token", r"hf_[A-Za-z0-9]{30,}"),
    _token(
        "ai_provider_token",
        r"gsk_[A-Za-z0-9]{40,}",
        r"r8_[A-Za-z0-9]{30,}",
        r"xai-[A-Za-z0-9]{40,}",
        r"pplx-[A-Za-z0-9]{40,}",
        r"lsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10}",
    ),
    # -- chat
    _token("slack_token", r"xox[abposrcde]-[A-Za-z0-9\-%]+", r"xoxe\.xox[a-z]-[A-Za-z0-9\-]+"),
    _token("slack_token", r"xapp-\d-[A-Za-z0-9\-]{10,}"),
    Rule(
        "slack_webhook",
        re.compile(r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_\-]+"),
        hints=("hooks.slack.com",),
    ),
    Rule(
        "discord_webhook",
        re.compile(
            r"https://(?:canary\.|ptb\.)?discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_\-]+"
        ),
        hints=("/api/webhooks/",),
    ),
    Rule(
        "teams_webhook",
        re.compile(
            r"https://[A-Za-z0-9.\-]+\.webhook\.office\.com/\S+"
            r"|https://outlook\.office(?:365)?\.com/webhook/\S+"
        ),
        hints=("webhook.office.com", "/webhook/"),
    ),
    _token("telegram_token", r"\d{8,10}:AA[A-Za-z0-9_\-]{33}" + _E, hints=(":aa",)),
    _token(
        "discord_bot_token",
        r"[MNO][A-Za-z0-9]{23,25}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,38}",
        hints=(".",),
    ),
    # -- mail and SaaS
    _token("sendgrid_key", r"SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}"),
    _token("mailgun_key", r"key-[a-f0-9]{32}" + _E),
    _token("mailchimp_key", r"[a-f0-9]{32}-us\d{1,2}" + _E, hints=("-us",)),
    _token("twilio_key", r"SK[a-fA-F0-9]{32}" + _E),
    _token(
        "saas_token",
        r"lin_api_[A-Za-z0-9]{40}",
        r"ntn_[A-Za-z0-9]{40,}",
        r"secret_[A-Za-z0-9]{43}" + _E,
        r"dp\.(?:pt|st|sa|ct)\.[A-Za-z0-9]{40,}",
        r"gl(?:sa|c)_[A-Za-z0-9+/=_]{32,}",
        r"NRAK-[A-Z0-9]{27}",
        r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}",
        r"sntry[su]_[A-Za-z0-9+/=_\-]{40,}",
        r"HRKU-[A-Za-z0-9_\-]{30,}",
        r"AGE-SECRET-KEY-1[A-Z0-9]{58}",
    ),
    # -- JWT (header and payload both JSON objects, base64url)
    Rule(
        "jwt",
        re.compile(rf"{_B}eyJ"),
        hints=("eyj",),
        tail=re.compile(r"[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*"),
        skip=re.compile(r"[A-Za-z0-9_\-]*"),
    ),
    # -- HTTP authentication
    Rule(
        "auth_header",
        re.compile(
            r"(?i:\b(?:proxy-)?authorization\s*[:=]\s*[\"']?)"
            r"(?:(?i:digest|negotiate|ntlm)\s+(?P<secret>[^\r\n]+)"
            r"|(?i:bearer|basic|token|apikey|api-key|sso-key)\s+(?P<secret2>[^\s\"'`]+))"
        ),
        hints=("authorization",),
    ),
    Rule(
        "auth_header",
        re.compile(r"(?i:\b(?:proxy-)?authorization\s*[:=]\s*[\"']?)(?P<secret>[^\s\"'`]+)"),
        _secretish,
        hints=("authorization",),
    ),
    Rule(
        "auth_header",
        re.compile(r"(?i:\b(?:set-)?cookie\s*:\s*)(?P<secret>[^\r\n]+)"),
        hints=("cookie",),
    ),
    Rule(
        "auth_header",
        re.compile(r"(?i:\bbearer\s+)(?P<secret>[A-Za-z0-9._~+/\-]{8,}=*)"),
        hints=("bearer",),
    ),
    Rule(
        "auth_header",
        re.compile(r"\bBasic\s+(?P<secret>[A-Za-z0-9+/]{8,}={0,2})"),
        _basic_credentials,
        hints=("basic",),
    ),
    # -- key = value (env assignments, JSON, YAML, query strings, XML)
    Rule(
        "key_assignment",
        re.compile(
            # (dots or dashes before the name are no part of it: `…OPENAI_KEY=` as a
            # clipped text starts, `--db.password=`)
            rf"(?<!{_KEY_CHARS})[\"']?[.\-]*(?P<key>[A-Za-z_]{_KEY_CHARS}*)[\"']?"
            r"(?:\s*(?:=>|:=|=|:)\s*)"
        ),
        hints=("=", ":"),
        # Not a scheme word with a credential after it (`token: Bearer …`: auth_header's);
        # a scheme word alone (`password=BEARER`) is the value.
        tail=re.compile(r"(?!(?i:bearer|basic|token|digest|negotiate|ntlm)[ \t]+\S)" + _VALUE),
    ),
    Rule(
        "key_assignment",
        re.compile(r"<(?P<key>[A-Za-z][\w.\-]*)>(?P<secret>[^<]+)</(?P=key)>"),
        hints=("</",),
    ),
    # -- command-line flags
    Rule(
        "cli_password",
        re.compile(
            r"(?<!\S)--?(?P<key>[A-Za-z][\w\-]*)(?:=|\s+)(?P<secret>\"[^\"]*\"|'[^']*'|[^\s\-<|;&][^\s|;&]*)"
        ),
        hints=("-",),
    ),
    # (A command, then its flag in the rest of the command: `_COMMAND_REST`.)
    Rule(
        "cli_password",
        re.compile(
            r"\b(?:mysql\w*|mariadb\w*|mongo(?:sh|dump|restore)?|sshpass|(?:docker|podman|helm)\s+"
            r"(?:registry\s+)?login|az\s+login)\b"
        ),
        hints=("mysql", "mariadb", "mongo", "sshpass", "login"),
        tail=re.compile(r"[^\n;|&]*?\s-p[ \t]*(?P<secret>[^\s\-][^\s;|&]*)"),
        skip=_COMMAND_REST,
    ),
    # `htpasswd -b[c…] FILE USER PASSWORD`, `htpasswd -nb USER PASSWORD`
    Rule(
        "cli_password",
        re.compile(r"\bhtpasswd\b"),
        hints=("htpasswd",),
        tail=re.compile(
            r"[^\n;|&]*?\s-(?:(?=[A-Za-z]*n)(?=[A-Za-z]*b)[A-Za-z]+\s+[^\s;|&]+"
            r"|(?=[A-Za-z]*b)[A-Za-z]+\s+[^\s;|&]+\s+[^\s;|&]+)\s+(?P<secret>[^\s;|&]+)"
        ),
        skip=_COMMAND_REST,
    ),
    Rule(
        "cli_password",
        re.compile(r"\bredis-cli\b"),
        hints=("redis-cli",),
        tail=re.compile(r"[^\n;|&]*?\s-a[ \t]*(?P<secret>[^\s\-]\S*)"),
        skip=_COMMAND_REST,
    ),
    Rule(
        "cli_password",
        re.compile(r"(?<!\S)-pass(?:in|out)?\s+pass:(?P<secret>\S+)"),
        hints=("pass:",),
    ),
    Rule(
        "cli_password",
        re.compile(r"\b(?:curl|wget|http)\b"),
        hints=("curl", "wget", "http"),
        tail=re.compile(r"[^\n;|&]*?\s(?:-u|--user)[ \t]*[^\s:]+:(?P<secret>\S+)"),
        skip=_COMMAND_REST,
    ),
    Rule("cli_password", re.compile(r"(?<!\S)-U[ \t]*[^\s%]+%(?P<secret>\S+)"), hints=("%",)),
    # -- `password X`, `api_key X`, `the token is X` in prose
    Rule(
        "secret_word",
        re.compile(
            r"(?i:\b(?:api[_\- ]?key|password|passwd|passphrase|token|secret|pwd|pw)\s+"
            r"(?:(?:is|was|of|=)\s+)?)(?P<secret>\S+)"
        ),
        _secretish,
        hints=("key", "pass", "token", "secret", "pw"),
    ),
)

#: Rules whose `key` group must name a secret (`is_secret_name`).
_KEYED = frozenset({"key_assignment", "cli_password"})

RULE_NAMES: tuple[str, ...] = tuple(dict.fromkeys(rule.name for rule in RULES))


def normalise(text: str) -> tuple[str, list[int] | None]:
    """`text` as the rules see it: NFKC per character, format characters (zero-width space,
    joiners, BOM, bidi controls, soft hyphen) removed. Also returns, for each character of
    the result, the index of the character of `text` it came from (None: unchanged)."""
    if text.isascii():
        return text, None
    out: list[str] = []
    where: list[int] = []
    for i, ch in enumerate(text):
        if ch.isascii():
            out.append(ch)
            where.append(i)
            continue
        if unicodedata.category(ch) == "Cf":
            continue
        for c in unicodedata.normalize("NFKC", ch):
            out.append(c)
            where.append(i)
    return "".join(out), where


#: Every hint of the rules, each with the positions (in `RULES`) of the rules it lets run.
_HINTS: tuple[tuple[str, tuple[int, ...]], ...] = tuple(
    (hint, tuple(i for i, rule in enumerate(RULES) if hint in rule.hints))
    for hint in dict.fromkeys(h for rule in RULES for h in rule.hints)
)
#: Positions of the rules without hints: they always run.
_ALWAYS: frozenset[int] = frozenset(i for i, rule in enumerate(RULES) if not rule.hints)


def _due(lower: str) -> list[Rule]:
    """The rules (in `RULES` order) that must run on a text whose lower case is `lower`:
    those without hints, and those with a hint in it. One pass over the distinct hints
    instead of one per rule."""
    due = set(_ALWAYS)
    for hint, positions in _HINTS:
        if hint in lower:
            due.update(positions)
    return [RULES[i] for i in sorted(due)]


def find(text: str, rules: tuple[Rule, ...] = RULES) -> list[Span]:
    """(start, end, rule) of every secret in `text` (already normalised), unmerged.

    A rule runs only if one of its hints is in the text. A match a rule rejects (its key
    names no secret, its check fails) does not hide what overlaps it: the search resumes
    one character after where that match began."""
    spans: list[Span] = []
    lower = text.lower()
    if rules is RULES:
        due = _due(lower)
    else:
        due = [r for r in rules if not r.hints or any(h in lower for h in r.hints)]
    for rule in due:
        pos = 0
        while pos <= len(text):
            match = rule.pattern.search(text, pos)
            if match is None:
                break
            begin = match.start()
            if not _key_allowed(rule, match):
                pos = max(match.end(), begin + 1)
                continue
            rest = None
            if rule.tail is not None:
                rest = rule.tail.match(text, match.end())
                if rest is None:
                    skipped = match.end() if rule.skip is None else _skip(rule.skip, text, match)
                    pos = max(skipped, begin + 1)
                    continue
            span = _secret_span(rule, match, rest, text)
            end = match.end() if rest is None else rest.end()
            if span is None:
                # Without a tail, a later match may start inside this one (a check that
                # refused `Authorization: word` lets `Bearer …` after it be found).
                pos = begin + 1 if rest is None else max(match.end(), begin + 1)
                continue
            spans.append((*span, rule.name))
            pos = max(end, begin + 1)
    return spans


def _skip(skip: re.Pattern[str], text: str, match: re.Match[str]) -> int:
    skipped = skip.match(text, match.end())
    return match.end() if skipped is None else skipped.end()


def _key_allowed(rule: Rule, match: re.Match[str]) -> bool:
    """For a rule whose `key` group must name a secret: whether it does."""
    if rule.name not in _KEYED:
        return True
    key = match.groupdict().get("key")
    if key is None:
        return True
    # `Authorization:` is the auth_header rules' (scheme words stay visible).
    return is_secret_name(key) and key_segments(key)[-1:] != ["authorization"]


def _secret_span(
    rule: Rule, match: re.Match[str], rest: re.Match[str] | None, text: str
) -> tuple[int, int] | None:
    start, end = match.span()
    name = None
    for part in (match, rest):
        if part is None:
            continue
        groups = part.groupdict()
        name = next((g for g in ("secret", "secret2") if groups.get(g) is not None), None)
        if name is not None:
            start, end = part.span(name)
            break
    if name is None and rest is not None:
        end = rest.end()  # no secret group: the whole of head and tail
    value = text[start:end]
    if name and len(value) > 1 and value[0] in "\"'" and value[-1] == value[0]:
        start, end = start + 1, end - 1  # a quoted value: the quotes stay
        value = text[start:end]
    if not value or (rule.check is not None and not rule.check(value)):
        return None
    return start, end
