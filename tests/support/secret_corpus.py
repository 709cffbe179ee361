"""The secret corpus: generated fake secrets in the contexts agents send them, and near misses.

Every fake is generated from a seeded generator at import time (nothing here is
a real credential; the repository holds only the recipes). A `Fake` is the text
an agent would send (`text`) and the part of it that must never reach Slack
(`secret`); `rule` names the rule of `bot.masking.rules` expected to catch it.
A `NearMiss` is text that looks close to a rule's secret but is not one: it must
come back unchanged. `tests/bot/masking/test_secret_rules.py` checks every rule has at
least one of each; `tests/bot/masking/test_no_leaks.py` renders every Slack surface
with every fake.
"""

from __future__ import annotations

import base64
import json
import random
import string
from dataclasses import dataclass, field
from typing import Any

_rng = random.Random(20261201)

LOWER = string.ascii_lowercase
UPPER = string.ascii_uppercase
DIGITS = string.digits
ALNUM = LOWER + UPPER + DIGITS
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"


def rand(alphabet: str, n: int) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


def mixed(alphabet: str, n: int) -> str:
    """`n` characters of `alphabet` with at least one upper, one lower and one digit."""
    while True:
        s = rand(alphabet, n)
        if (
            any(c.isupper() for c in s)
            and any(c.islower() for c in s)
            and any(c.isdigit() for c in s)
        ):
            return s


def password(n: int = 16, extra: str = "!#$%*+") -> str:
    return mixed(ALNUM, n - 2) + _rng.choice(extra) + _rng.choice(DIGITS)


def fullwidth(text: str) -> str:
    """`text` in full-width forms (U+FF01…U+FF5E): NFKC maps them back to ASCII."""
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def b64url(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


@dataclass(frozen=True)
class Fake:
    """`text` as an agent sends it; `secret` must not reach Slack, whole or in pieces."""

    rule: str
    text: str
    secret: str
    #: When set, the fake as a JSON value (a list of lines, say) rather than one string.
    value: Any = field(default=None, compare=False)

    @property
    def as_value(self) -> Any:
        return self.text if self.value is None else self.value


@dataclass(frozen=True)
class NearMiss:
    """Text close to `rule`'s secrets that is not a secret: it must come back unchanged."""

    rule: str
    text: str


FAKES: list[Fake] = []
NEAR_MISSES: list[NearMiss] = []


def fake(rule: str, template: str, secret: str) -> None:
    FAKES.append(Fake(rule, template.format(s=secret), secret))


def near(rule: str, text: str) -> None:
    NEAR_MISSES.append(NearMiss(rule, text))


# ---------------------------------------------------------------- private keys (PEM)

for kind in ("RSA ", "EC ", "OPENSSH ", "ENCRYPTED ", "", "DSA "):
    body = "\n".join(rand(B64, 64) for _ in range(4))
    head, tail = f"-----BEGIN {kind}PRIVATE KEY-----", f"-----END {kind}PRIVATE KEY-----"
    fake("pem_private_key", "key:\n{s}\ndone", f"{head}\n{body}\n{tail}")
pgp = "\n".join(rand(B64, 64) for _ in range(3))
fake(
    "pem_private_key",
    "{s}",
    f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{pgp}\n-----END PGP PRIVATE KEY BLOCK-----",
)
unterminated = rand(B64, 70)
fake("pem_private_key", "{s}", f"-----BEGIN OPENSSH PRIVATE KEY-----\n{unterminated}")
# A private key split across list items (one line per item).
lines = [rand(B64, 64) for _ in range(3)]
split = ["-----BEGIN RSA PRIVATE KEY-----", *lines, "-----END RSA PRIVATE KEY-----"]
FAKES.append(Fake("pem_private_key", "\n".join(split), "\n".join(lines), value=split))
FAKES.append(Fake("pem_private_key", "\n".join(split[:3]), lines[1], value=split[:3]))
# A service-account JSON file as an agent pastes it (escaped newlines).
sa_body = rand(B64, 64)
fake(
    "pem_private_key",
    '{{"type": "service_account", "private_key": "{s}\\n"}}',
    f"-----BEGIN PRIVATE KEY-----\\n{sa_body}\\n-----END PRIVATE KEY-----",
)
near(
    "pem_private_key",
    "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUAbc\n-----END CERTIFICATE-----",
)
near("pem_private_key", "-----BEGIN PUBLIC KEY-----")

# ---------------------------------------------------------------- connection strings / URLs

for template, pw in (
    ("redis://:{s}@cache.internal:6379/0", password(18)),
    ("redis://default:{s}@cache.internal:6379", password(20)),
    ("postgres://app:{s}@db.internal:5432/orders", "p@ss" + password(14)),
    ("mysql://root:{s}@10.0.0.5/shop", "sl/ash" + password(12)),
    ("mongodb+srv://admin:{s}@cluster0.example.net/test?retryWrites=true", password(24)),
    ("amqp://guest:{s}@rabbit:5672/", password(16)),
    ("https://deploy:{s}@git.example.com/org/repo.git", password(22)),
    ("DATABASE_URL=postgresql://u:{s}@h/db psql", "a@b/c:d" + password(10)),
    ("git clone https://x-access-token:{s}@github.com/org/repo", mixed(ALNUM, 30)),
):
    fake("url_credentials", template, pw)
near("url_credentials", "https://example.com:8443/path?x=1")
near("url_credentials", "mailto:ops@example.com and https://example.com/a@b")

# ---------------------------------------------------------------- cloud keys

for prefix in ("AKIA", "ASIA", "ABIA"):
    fake(
        "aws_access_key_id",
        "aws configure set aws_access_key_id {s}",
        prefix + rand(UPPER + DIGITS, 16),
    )
aws_secret = mixed(B64, 40)
fake("aws_secret_key", "{s}", aws_secret)
fake("aws_secret_key", "creds: {s} (rotate monthly)", mixed(B64, 40))
fake("aws_secret_key", '["{s}"]', mixed(B64, 40))
near("aws_access_key_id", "AKIA-not-a-key and AKIAshort")
near("aws_secret_key", "commit 3f786850e387550fdab836ed7e6dc881de23001b is the fix")
near("aws_secret_key", "Approved by the on-call engineer after reviewing the runbook")
fake("google_api_key", "maps?key={s}", "AIza" + rand(URLSAFE, 35))
fake("google_api_key", "GOOGLE_MAPS={s}", "AIza" + rand(URLSAFE, 35))
near("google_api_key", "AIzaTooShort and Aiza" + rand(URLSAFE, 35).lower())
fake("google_oauth", "client secret {s}", "GOCSPX-" + rand(URLSAFE, 28))
fake("google_oauth", "Authorization: Bearer {s}", "ya29." + rand(URLSAFE, 60))
near("google_oauth", "GOCSPX- is the prefix of Google client secrets")
azure_key = mixed(B64, 86) + "=="
fake(
    "azure_storage_key",
    "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={s};EndpointSuffix=core.windows.net",
    azure_key,
)
fake("azure_storage_key", "{s}", mixed(B64, 86) + "==")
near("azure_storage_key", "AccountName=acct;EndpointSuffix=core.windows.net")
fake("digitalocean_token", "doctl auth init -t {s}", "dop_v1_" + rand(HEX, 64))
near("digitalocean_token", "dop_v1_ tokens are 64 hex characters")
fake("hashicorp_vault", "VAULT={s}", "hvs." + rand(URLSAFE, 90))
fake(
    "hashicorp_vault",
    "terraform login token {s}",
    rand(LOWER + DIGITS, 14) + ".atlasv1." + rand(URLSAFE, 67),
)
near("hashicorp_vault", "hvs. is a Vault service token prefix")
fake("databricks_token", "DATABRICKS_HOST=x {s}", "dapi" + rand(HEX, 32))
near("databricks_token", "dapi is short for data api")

# ---------------------------------------------------------------- VCS tokens

for prefix in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"):
    fake("github_token", "gh auth login --with-token <<< {s}", prefix + rand(ALNUM, 36))
fake("github_token", "{s}", "github_pat_" + rand(ALNUM, 22) + "_" + rand(ALNUM, 59))
near("github_token", "ghp_ is GitHub's prefix; see gh_pages and ghp-import")
for prefix in ("glpat-", "gldt-", "glptt-", "glrt-"):
    fake("gitlab_token", "PRIVATE-TOKEN {s}", prefix + rand(URLSAFE, 20))
fake("gitlab_token", "register --token {s}", "GR1348941" + rand(URLSAFE, 20))
near("gitlab_token", "glpat-short and glpat_" + rand(ALNUM, 20))
fake("atlassian_token", "bitbucket app password {s}", "ATBB" + rand(ALNUM, 32))
fake("atlassian_token", "jira {s}", "ATATT3xFfGF0" + rand(URLSAFE, 100))
near("atlassian_token", "ATBBQ is not a word")

# ---------------------------------------------------------------- package registries

fake("npm_token", "//registry.npmjs.org/:_authToken={s}", "npm_" + rand(ALNUM, 36))
fake("npm_token", "NPM {s}", "npm_" + rand(ALNUM, 36))
near("npm_token", "npm_config_cache=/tmp/npm and npm_package_version")
fake("pypi_token", "twine upload -p {s}", "pypi-AgEIcHlwaS5vcmc" + rand(URLSAFE, 70))
near("pypi_token", "pypi-simple and pypi-AgE")
fake("rubygems_token", "GEM_HOST_API_KEY {s}", "rubygems_" + rand(HEX, 48))
near("rubygems_token", "rubygems_version 3.4")
fake(
    "docker_token", "docker login -u bot --password-stdin <<< {s}", "dckr_pat_" + rand(URLSAFE, 27)
)
near("docker_token", "dckr_pat_ prefix")
fake("nuget_key", "dotnet nuget push -k {s}", "oy2" + rand(LOWER + DIGITS, 43))
near("nuget_key", "oy2 is not a key")
fake("crates_token", "cargo login {s}", "cio" + rand(ALNUM, 32))
near("crates_token", "cio meeting notes")

# ---------------------------------------------------------------- payment

for prefix in ("sk_live_", "sk_test_", "rk_live_", "rk_test_"):
    fake("stripe_key", "stripe {s}", prefix + rand(ALNUM, 24))
fake("stripe_webhook_secret", "STRIPE_WEBHOOK {s}", "whsec_" + rand(ALNUM, 32))
near("stripe_key", "pk_live_" + rand(ALNUM, 24) + " is publishable; sk_live_ is the prefix")
near("stripe_webhook_secret", "whsec_ is the webhook secret prefix")
fake("square_token", "square {s}", "sq0atp-" + rand(URLSAFE, 22))
fake("square_token", "square {s}", "sq0csp-" + rand(URLSAFE, 43))
fake("square_token", "square {s}", "EAAA" + rand(URLSAFE, 60))
near("square_token", "sq0atp- prefix, EAAA short")
fake(
    "braintree_token",
    "{s}",
    f"access_token$production${rand(LOWER + DIGITS, 16)}${rand(HEX, 32)}",
)
near("braintree_token", "access_token$production$ docs")
fake("shopify_token", "X-Shopify-Access {s}", "shpat_" + rand(HEX, 32))
near("shopify_token", "shpat_ prefix")

# ---------------------------------------------------------------- AI APIs

fake("openai_key", "client = OpenAI({s})", "sk-proj-" + rand(URLSAFE, 48))
fake("openai_key", "{s}", "sk-" + rand(ALNUM, 20) + "T3BlbkFJ" + rand(ALNUM, 20))
fake("openai_key", "ANTHROPIC {s}", "sk-ant-api03-" + rand(URLSAFE, 80))
fake("openai_key", "svc {s}", "sk-svcacct-" + rand(URLSAFE, 40))
near("openai_key", "task-list and sk-short and risk-assessment-document-for-q3")
fake("huggingface_token", "HF {s}", "hf_" + rand(ALNUM, 34))
near("huggingface_token", "hf_hub_download and hf_transfer")
fake("ai_provider_token", "GROQ {s}", "gsk_" + rand(ALNUM, 52))
fake("ai_provider_token", "REPLICATE {s}", "r8_" + rand(ALNUM, 37))
fake("ai_provider_token", "XAI {s}", "xai-" + rand(ALNUM, 80))
fake("ai_provider_token", "PPLX {s}", "pplx-" + rand(ALNUM, 48))
fake("ai_provider_token", "LANGSMITH {s}", "lsv2_pt_" + rand(HEX, 32) + "_" + rand(HEX, 10))
near("ai_provider_token", "gsk_ and r8_ and xai-grok and lsv2_pt_")

# ---------------------------------------------------------------- chat tokens and webhooks

for prefix in ("xoxb-", "xoxp-", "xoxa-2-", "xoxr-", "xoxs-", "xoxc-", "xoxe-1-"):
    fake(
        "slack_token",
        "SLACK {s}",
        prefix + rand(DIGITS, 12) + "-" + rand(DIGITS, 12) + "-" + rand(ALNUM, 24),
    )
fake("slack_token", "cookie d={s}", "xoxd-" + rand(ALNUM, 40) + "%2F" + rand(ALNUM, 30) + "%3D")
fake("slack_token", "rotating {s}", "xoxe.xoxp-1-" + rand(ALNUM, 60))
fake(
    "slack_token",
    "socket {s}",
    "xapp-1-A" + rand(UPPER + DIGITS, 10) + "-" + rand(DIGITS, 13) + "-" + rand(HEX, 64),
)
near("slack_token", "xoxb- alone, xox_b and xoxz-1 are not tokens")
fake(
    "slack_webhook",
    "curl -X POST {s}",
    "https://hooks.slack.com/services/"
    f"T{rand(UPPER + DIGITS, 8)}/B{rand(UPPER + DIGITS, 8)}/{rand(ALNUM, 24)}",
)
fake(
    "slack_webhook",
    "{s}",
    "https://hooks.slack.com/workflows/"
    f"T{rand(UPPER + DIGITS, 8)}/A{rand(UPPER + DIGITS, 8)}/{rand(DIGITS, 18)}/{rand(ALNUM, 24)}",
)
near("slack_webhook", "see https://api.slack.com/messaging/webhooks and hooks.slack.com")
fake(
    "discord_webhook",
    "{s}",
    f"https://discord.com/api/webhooks/{rand(DIGITS, 18)}/{rand(URLSAFE, 68)}",
)
near("discord_webhook", "https://discord.com/developers/docs/resources/webhook")
fake(
    "teams_webhook",
    "{s}",
    f"https://contoso.webhook.office.com/webhookb2/{rand(HEX, 8)}-{rand(HEX, 4)}@{rand(HEX, 8)}"
    f"/IncomingWebhook/{rand(HEX, 32)}/{rand(HEX, 8)}",
)
near("teams_webhook", "https://learn.microsoft.com/en-us/microsoftteams/webhooks")
fake("telegram_token", "TELEGRAM {s}", rand(DIGITS, 10) + ":AA" + rand(URLSAFE, 33))
near("telegram_token", "at 12:30 AA meeting, ticket 1234567890:AB")
fake(
    "discord_bot_token",
    "DISCORD {s}",
    "M" + rand(ALNUM, 25) + "." + rand(URLSAFE, 6) + "." + rand(URLSAFE, 38),
)
near("discord_bot_token", "version M1.2.3 released")

# ---------------------------------------------------------------- mail / SaaS

fake("sendgrid_key", "{s}", "SG." + rand(URLSAFE, 22) + "." + rand(URLSAFE, 43))
near("sendgrid_key", "SG.1 is a section number")
fake("mailgun_key", "mailgun {s}", "key-" + rand(HEX, 32))
near("mailgun_key", "key-value store and key-1")
fake("mailchimp_key", "mailchimp {s}", rand(HEX, 32) + "-us12")
near("mailchimp_key", "en-us12 locale")
fake("twilio_key", "twilio {s}", "SK" + rand(HEX, 32))
near("twilio_key", "SKU 1234 and SKIP")
fake("saas_token", "linear {s}", "lin_api_" + rand(ALNUM, 40))
fake("saas_token", "notion {s}", "ntn_" + rand(DIGITS, 11) + rand(ALNUM, 35))
fake("saas_token", "doppler {s}", "dp.pt." + rand(ALNUM, 43))
fake("saas_token", "grafana {s}", "glsa_" + rand(ALNUM, 32) + "_" + rand(HEX, 8))
fake("saas_token", "newrelic {s}", "NRAK-" + rand(UPPER + DIGITS, 27))
fake("saas_token", "postman {s}", "PMAK-" + rand(HEX, 24) + "-" + rand(HEX, 34))
fake("saas_token", "sentry {s}", "sntrys_" + rand(URLSAFE, 60))
fake("saas_token", "heroku {s}", "HRKU-" + rand(URLSAFE, 60))
fake("saas_token", "age {s}", "AGE-SECRET-KEY-1" + rand(UPPER + DIGITS, 58))
near("saas_token", "lin_api_ docs, NRAK- prefix, PMAK- prefix, HRKU- prefix")

# ---------------------------------------------------------------- JWT

jwt = (
    b64url({"alg": "HS256", "typ": "JWT"})
    + "."
    + b64url({"sub": rand(DIGITS, 10), "name": "agent", "iat": 1700000000})
    + "."
    + rand(URLSAFE, 43)
)
fake("jwt", "Authorization: {s}", jwt)
fake("jwt", "id_token={s}", jwt.replace(jwt.rsplit(".", 1)[1], rand(URLSAFE, 43)))
fake("jwt", "{s}", b64url({"alg": "none"}) + "." + b64url({"sub": rand(ALNUM, 12)}) + ".")
near("jwt", "eyJ is base64 for '{\"' and eyJhbGciOi alone is not a token")

# ---------------------------------------------------------------- HTTP auth headers

fake(
    "auth_header", "curl -H 'Authorization: Bearer {s}' https://api.example.com", rand(URLSAFE, 40)
)
fake(
    "auth_header",
    "Authorization: Basic {s}",
    base64.b64encode(f"admin:{password(12)}".encode()).decode(),
)
fake("auth_header", "Authorization: token {s}", rand(HEX, 40))
fake(
    "auth_header",
    "Proxy-Authorization: Digest {s}",
    'username="u", response="' + rand(HEX, 32) + '"',
)
fake("key_assignment", "X-Api-Key: {s}", rand(ALNUM, 32))
fake("key_assignment", "X-Auth-Token: {s}", rand(ALNUM, 30))
fake("auth_header", "Cookie: session={s}; theme=dark", rand(URLSAFE, 32))
fake("auth_header", "Authorization: {s}", mixed(ALNUM, 32))
near("auth_header", "Authorization: required (see the runbook)")
near("auth_header", "Basic authentication is off; the cookie jar is empty")
near("auth_header", "the Bearer of bad news")

# ---------------------------------------------------------------- key names (assignments)

for template in (
    "password={s}",
    "DB_PASSWORD: {s}",
    "auth={s}",
    "pass={s}",
    "pw={s}",
    "pwd = {s}",
    "OPENAI_KEY={s}",
    "export STRIPE_SECRET={s}",
    "MYSQL_PWD={s} mysql",
    "PGPASSWORD={s} psql -h db",
    'config = {{"client_secret": "{s}"}}',
    "{{'api_key': '{s}'}}",
    "AccountKey={s};",
    "REDISCLI_AUTH={s} redis-cli",
    "db.passphrase := {s}",
    "aws_secret_access_key = {s}",
    fullwidth("password") + "={s}",
    fullwidth("API_KEY=") + "{s}",
):
    fake("key_assignment", template, password(_rng.randint(10, 20)))
fake("key_assignment", 'apiKey: "{s}"', rand(ALNUM, 24))
fake("key_assignment", "<password>{s}</password>", password(14))
near("key_assignment", "password reset for bob; passenger=alice; bypass=true; compass=north")
near("key_assignment", "author=alice keyboard=us primary_key=id public_key=ssh-ed25519")
near("key_assignment", "tokenizer=bert password_policy=strict")

# ---------------------------------------------------------------- CLI flags and words

for template in (
    "psql --password {s} -h db",
    "app --password={s}",
    "login --token {s}",
    "deploy --api-key {s} --env prod",
    "oauth --client-secret {s}",
    "mysql -u root -p{s} shop",
    "mysql -u root -p {s} shop",
    "mysqldump -uroot -p{s} shop > dump.sql",
    "sshpass -p {s} ssh host",
    "redis-cli -a {s} ping",
    "docker login -u bot -p {s} registry.example.com",
    "openssl rsa -passin pass:{s} -in key.pem",
):
    fake("cli_password", template, password(_rng.randint(10, 18)))
fake("cli_password", "curl -u deploy:{s} https://ci.example.com", password(16))
fake("cli_password", "curl --user deploy:{s} https://ci.example.com", password(16))
fake("cli_password", "smbclient //fs/share -U admin%{s}", password(14))
near("cli_password", "mkdir -p /srv/app/releases && ssh -p 2222 host && docker run -p 8080:80 web")
near("cli_password", "pytest -p no:cacheprovider && grep -u x")
fake("secret_word", "cancelled: rotated the api_key {s} by mistake", password(18))
fake("secret_word", "deny: password {s} is in the prompt", password(12))
fake("secret_word", "the token is {s}", password(20))
near("secret_word", "the password is too short; reset the token for bob and the api key rotation")
near("secret_word", "🔴 secret (values hidden); token (see vault); password [redacted]")

# ---------------------------------------------------------------- seen reaching Slack

# An argv list: the password is the item after `--password` (read joined, one per line).
argv_pw = password(16)
argv = ["mysql", "-h", "db.internal", "-u", "root", "--password", argv_pw, "shop"]
FAKES.append(Fake("cli_password", " ".join(argv), argv_pw, value=argv))
fake("cli_password", "az login -u ops@example.com -p {s} --tenant contoso", password(18))
fake("cli_password", "az login --service-principal -u http://app -p {s}", password(20))
fake("cli_password", "htpasswd -b /etc/nginx/.htpasswd admin {s}", password(14))
fake("cli_password", "htpasswd -bc /etc/apache2/.htpasswd deploy {s}", password(14))
fake("cli_password", "htpasswd -nb admin {s} > creds", password(14))
near("cli_password", "htpasswd -D /etc/nginx/.htpasswd admin && az login --identity")
near("cli_password", "mysql -h db.internal -u root shop --password")
# A Google OAuth refresh token (`1//0` and 60-100 URL-safe characters).
fake("google_oauth", "GOOGLE_REFRESH {s}", "1//0" + rand(URLSAFE, 99))
fake("google_oauth", "creds.refresh(token='{s}')", "1//0" + rand(URLSAFE, 60))
near("google_oauth", "print(1//0) raises ZeroDivisionError; so does 1//0x1F")
# A token glued into a tool name with `_` (the tool name reaches Slack and the logs).
fake("github_token", "deploy_{s}", "ghp_" + rand(ALNUM, 36))
fake(
    "slack_token",
    "notify_{s}",
    "xoxb-" + rand(DIGITS, 12) + "-" + rand(DIGITS, 13) + "-" + rand(ALNUM, 24),
)
near("github_token", "deploy_gh_pages and run_ghp_import")

# ---------------------------------------------------------------- evasions

gh = "ghp_" + rand(ALNUM, 36)
FAKES.append(Fake("github_token", gh[:10] + "\u200b" + gh[10:], gh))
FAKES.append(Fake("github_token", "tok " + gh[:5] + "\u2060" + gh[5:20] + "\ufeff" + gh[20:], gh))
sl = "xoxb-" + rand(DIGITS, 12) + "-" + rand(ALNUM, 24)
FAKES.append(
    Fake("slack_token", "".join(c + ("\u200c" if i % 7 == 3 else "") for i, c in enumerate(sl)), sl)
)
FAKES.append(Fake("slack_token", fullwidth(sl), sl))
pw = password(15)
FAKES.append(Fake("key_assignment", "pass\u200bword=" + pw, pw))
FAKES.append(Fake("key_assignment", fullwidth("token:") + pw[::-1], pw[::-1]))


#: A secret shows if any piece this long of it does (or the whole, when shorter).
PIECE = 12


def leaked_piece(shown: str, secret: str) -> str | None:
    """The first piece of `secret` (whole, or any `PIECE`-character window) found in `shown`,
    both normalised as the masking sees them (NFKC, format characters removed)."""
    from bot.masking.rules import normalise

    out, value = normalise(shown)[0], normalise(secret)[0]
    if len(value) <= PIECE:
        return value if value in out else None
    for i in range(len(value) - PIECE + 1):
        if value[i : i + PIECE] in out:
            return value[i : i + PIECE]
    return None


# ---------------------------------------------------------------- hostile texts (speed)


def _repeat(unit: str, n: int, head: str = "") -> str:
    """`head`, then `unit` repeated, cut to `n` characters."""
    body = unit * (max(n - len(head), 0) // len(unit) + 1)
    return (head + body)[:n]


#: Texts of `n` characters built to make a slow pattern slow: long runs of each character
#: class the rules read, and each rule's own opening repeated (each of which a quadratic
#: pattern would scan to the end of the text from). `bench/bench_masking.py` times every
#: rule on each; `tests/bot/masking/test_rule_speed.py` feeds each rule its worst at 2 MiB.
HOSTILE_TEXTS: dict[str, Any] = {
    **{f"run {c!r}": (lambda n, c=c: c * n) for c in "aA1-:=/@._\"'<% \n\t+"},
    "url: one scheme, no @": lambda n: _repeat("a", n, "http://a:"),
    "url: schemes": lambda n: _repeat("a://", n),
    "url: schemes with users": lambda n: _repeat("a://a:", n),
    "url: @ after @": lambda n: _repeat("@", n, "http://a:b"),
    "url: schemes with @": lambda n: _repeat("a://a:@_", n),
    "key: a=a=": lambda n: _repeat("a=", n),
    "key: a:a:": lambda n: _repeat("a:", n),
    "key: quoted": lambda n: _repeat('"a": ', n),
    "key: secret, open quote": lambda n: _repeat("\\a", n, 'password="'),
    "key: secret, long value": lambda n: _repeat("a", n, "password="),
    "key: spaces": lambda n: _repeat(" ", n, "a"),
    "xml: open tags": lambda n: _repeat("<a>", n),
    "xml: unclosed": lambda n: _repeat("b", n, "<password>"),
    "flag: --a": lambda n: _repeat("--a ", n),
    "flag: --a=x": lambda n: _repeat("--a=x", n),
    "flag: -a": lambda n: _repeat("-a", n),
    "cli: mysql": lambda n: _repeat("mysql ", n),
    "cli: mysql -p": lambda n: _repeat("mysql -p", n),
    "cli: mysql dashes": lambda n: _repeat("-mysql", n),
    "cli: docker login": lambda n: _repeat("docker login ", n),
    "cli: redis-cli": lambda n: _repeat("redis-cli ", n),
    "cli: curl": lambda n: _repeat("curl ", n),
    "cli: curl -u": lambda n: _repeat("curl -u a", n),
    "cli: -pass pass:": lambda n: _repeat("-pass pass:", n),
    "cli: -U": lambda n: _repeat("-U a", n),
    "pem: BEGIN": lambda n: _repeat("-----BEGIN PRIVATE KEY-----", n),
    "pem: BEGIN, no key": lambda n: _repeat("A", n, "-----BEGIN "),
    "auth: authorization:": lambda n: _repeat("authorization: ", n),
    "auth: spaces": lambda n: _repeat(" ", n, "authorization:"),
    "auth: letters": lambda n: _repeat("a", n, "authorization: "),
    "auth: cookie": lambda n: _repeat("cookie: ", n),
    "auth: bearer": lambda n: _repeat("bearer ", n),
    "auth: Basic": lambda n: _repeat("A", n, "Basic "),
    "word: password": lambda n: _repeat("password ", n),
    "word: password is": lambda n: _repeat("password is ", n),
    "jwt: eyJ.eyJ.": lambda n: _repeat("eyJaaaaa.eyJaaaaa.", n),
    "jwt: eyJ-": lambda n: _repeat("eyJaa-", n),
    "jwt: no dot": lambda n: _repeat("a", n, "eyJ"),
    "token: mixed 40": lambda n: _repeat("aB1" * 20 + " ", n),
    "token: ghp_": lambda n: _repeat("ghp_", n),
    "token: sk-a-": lambda n: _repeat("sk-a-", n),
    "token: digits:": lambda n: _repeat("1" * 9 + ":", n),
    "token: M run": lambda n: _repeat("a", n, "M"),
    "token: a.": lambda n: _repeat("a.", n),
    "token: atlasv1": lambda n: _repeat("a" * 14 + ".atlasv", n),
    "token: -us": lambda n: _repeat("a" * 32 + "-us", n),
    "webhook: teams": lambda n: _repeat("https://a.webhook.office.com/", n),
    "webhook: dots": lambda n: _repeat("a.", n, "https://"),
    "webhook: slack": lambda n: _repeat("https://hooks.slack.com/services/", n),
    "webhook: discord digits": lambda n: _repeat("1", n, "https://discord.com/api/webhooks/"),
    "words": lambda n: _repeat("a ", n),
}
