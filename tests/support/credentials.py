"""The credentials tests and benchmarks use: made-up values in the shapes real ones have.

A real Slack bot token is `xoxb-<10 digits>-<13 digits>-<24 letters and digits>`, an
app-level token `xapp-1-A<10 capitals and digits>-<13 digits>-<64 hex>`, a signing secret
32 hex digits. Tests that used `xoxb-test` passed where the real bot failed: the masker
does not recognise `xapp-test`, and so never showed that it rewrote the app token on its way
to `apps.connections.open`. With these shapes every test runs the paths a real
token runs. None of them is a real credential: they were drawn once from
`random.Random(31)` and written here as literals. `tests/test_suite_hygiene.py` refuses a
Slack token or signing secret of any other shape in a test or benchmark.
"""

from __future__ import annotations

import re

#: The bot token (`SLACK_BOT_TOKEN`) the Slack emulator accepts for every Web API method.
BOT_TOKEN = "xoxb-0716202183-2200238786391-hbX84zvmnvzxM9pnUnALQJd9"
#: A bot token of the right shape that the emulator does not know (refused: `invalid_auth`).
OTHER_BOT_TOKEN = "xoxb-0252326018-7336535370454-vKzEPP1u9nVgYXt5lJN7I1Rs"
#: The app-level token (`SLACK_APP_TOKEN`, `connections:write`): `apps.connections.open` only.
APP_TOKEN = (
    "xapp-1-AFLMBXGZSTM-1735760814113-"
    "6a54f1f8bf13f4f08ffb703c9e514316695ec76e9ea4b3b69c513d647c96d978"
)
#: An app-level token of the right shape that the emulator does not know.
OTHER_APP_TOKEN = (
    "xapp-1-ACC4RQ8M1XN-6076333554513-"
    "27ffe85d12f49f008c89979c774a360bf9f89cc67d1771da831a7fd419a1d7e4"
)
#: A user token (`xoxp-`): never the bot's; settings refuse it in SLACK_BOT_TOKEN.
USER_TOKEN = "xoxp-3410968000-9324178111-1256451590268-f7f701b7741e43cb28fa9cb3c14b0473"
#: A rotating bot token (token rotation on: `xoxe.xoxb-1-…`, valid 12 hours).
ROTATING_BOT_TOKEN = (
    "xoxe.xoxb-1-BKu3TPqIj8YQ4XZpJDTe3TcHt2wSUGvMWqqw8GBLLaOM0ZK9nC7KueH1Pt46uxz8aU2zcSOafM"
    "LVtnABT6EBNuVV1lgM10VdoNf5myfBKHTFRrIkRgIPpB6w"
)
#: The refresh token that comes with a rotating one (`xoxe-1-…`): never an access token.
REFRESH_TOKEN = (
    "xoxe-1-ARdGrq1l4bU03uKUg1vzJG2UjPNxNmVsPbPOBP2XkCLUkJ32GJ9R9MsmDeD0cSDGv6tl1UqGAg7iub0m"
    "RX6EadxFb6YStsEixgo8QpbyE17WWpPr1T8vry8j"
)
#: The app's signing secret (`SLACK_SIGNING_SECRET`): Slack signs requests to the bot with it.
SIGNING_SECRET = "20ffe8ff0a752eb1cac6d71e1dec4ad7"
#: A signing secret of the right shape that is not the app's.
OTHER_SIGNING_SECRET = "82e14964ce78aada8eda257853398ed6"
#: The deprecated verification token Slack still puts in every interaction payload (`token`).
VERIFICATION_TOKEN = "evx8kMsxr4ihjqKeeQnFctJC"

#: Bearer tokens of the bot's own HTTP API (`APPROVALS_API_TOKENS`), as
#: `secrets.token_urlsafe(32)` makes them.
API_TOKEN = "kmQ-9Ts39thGPONhPpDwHrMX4OHjvts8s26xw6rTX-z"
OTHER_API_TOKEN = "9Rb_Vyr9NuAm7_SrjLvimcgSxEjV01MgMZmimZuLueS"
THIRD_API_TOKEN = "jsYKmPFF8T02vHbEBctnJy-CS6uK7UDJTI7RWz31fc7"
#: An admin token (`APPROVALS_ADMIN_TOKENS`).
ADMIN_TOKEN = "R81k7-daEgYKYJl5Fu5FYx_DqJReHJndYZf7m5o7XMv"
#: A bearer token of the right shape that no test configures (refused: 403).
UNKNOWN_API_TOKEN = "b4udkouEcwZFSLDjkhpuRAsVeQdPknD70U-01fA4ngt"
#: An upstream MCP server's bearer token (`--upstream-bearer-env`), in a GitHub token's shape,
#: one the masker recognises: it must reach the upstream untouched all the same.
UPSTREAM_TOKEN = "ghp_FiVXmRw1LZmT6vb04qQrzysZ3HTxn4umfSOR"

#: The shapes above, for tests that check a value is one.
BOT_TOKEN_SHAPE = re.compile(r"xoxb-\d{10}-\d{13}-[A-Za-z0-9]{24}")
APP_TOKEN_SHAPE = re.compile(r"xapp-1-A[A-Z0-9]{10}-\d{13}-[0-9a-f]{64}")
SIGNING_SECRET_SHAPE = re.compile(r"[0-9a-f]{32}")
API_TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]{32,}")
