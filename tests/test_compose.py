"""compose.yaml and the Dockerfile say what the README promises, checked without a Docker engine.

- Redis persists (AOF on a named volume) and reports health; workers wait for it.
- `docker compose up --scale worker=N` works: no container_name, no host ports on the worker.
- Workers and the gateway run real `aeon` commands against the compose Redis.
- The image installs the project from files that exist and are not dockerignored.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "compose.yaml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
LLM_VARS = ("AEON_LLM", "AEON_LLM_BASE_URL", "AEON_LLM_MODEL", "AEON_LLM_API_KEY")


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


def argv(value: Any) -> list[str]:
    """A Compose command/entrypoint (list or string) as an argv list."""
    if value is None:
        return []
    if isinstance(value, str):
        return shlex.split(value)
    return [str(part) for part in value]


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {key: "" if value is None else str(value) for key, value in env.items()}


def aeon_subcommand(args: list[str]) -> str | None:
    """`aeon [options] <subcommand> ...` → subcommand; None when args are not an aeon call."""
    if not args or Path(args[0]).name != "aeon":
        return None
    rest = [arg for arg in args[1:] if not arg.startswith("-")]
    return rest[0] if rest else None


def duration_s(value: str | int | float) -> float:
    """A Compose duration ("30s", "1m30s", "500ms") in seconds."""
    if isinstance(value, int | float):
        return float(value)
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", value)
    assert parts and "".join(n + u for n, u in parts) == value, f"bad duration {value!r}"
    return sum(float(n) * units[u] for n, u in parts)


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    current = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if current and line.startswith("#"):
            continue  # comment inside a continued instruction
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        name, _, args = current.strip().partition(" ")
        instructions.append((name.upper(), args.strip()))
        current = ""
    assert not current, "Dockerfile ends inside a continued line"
    return instructions


def split_args(args: str) -> list[str]:
    """Arguments of COPY/CMD/ENTRYPOINT: JSON (exec) form or shell words."""
    if args.startswith("["):
        return json.loads(args)
    return shlex.split(args)


def final_stage() -> list[tuple[str, str]]:
    instructions = dockerfile_instructions()
    last_from = max(i for i, (name, _) in enumerate(instructions) if name == "FROM")
    return instructions[last_from:]


def copy_sources() -> list[str]:
    """Paths the Dockerfile copies from the build context (not from other stages)."""
    sources: list[str] = []
    for name, args in dockerfile_instructions():
        if name not in {"COPY", "ADD"}:
            continue
        words = split_args(args)
        flags = [w for w in words if w.startswith("--")]
        if any(flag.startswith("--from") for flag in flags):
            continue
        paths = [w for w in words if not w.startswith("--")]
        assert len(paths) >= 2, f"{name} {args}: needs a source and a destination"
        sources.extend(p.removeprefix("./").rstrip("/") for p in paths[:-1])
    return sources


def project_packages() -> list[str]:
    """Top-level packages pyproject.toml ships (tool.setuptools.packages.find include)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    return sorted({pattern.rstrip("*").rstrip(".") for pattern in include})


# --------------------------------------------------------------------------- compose.yaml


def test_services_exist(services: dict[str, Any]) -> None:
    assert {"redis", "worker", "gateway"} <= set(services)


def test_redis_persists_to_a_named_volume(compose: dict[str, Any], services) -> None:
    redis = services["redis"]
    assert str(redis["image"]).startswith("redis:7")
    command = argv(redis.get("command"))
    assert command[0] == "redis-server"
    assert "--appendonly" in command
    assert command[command.index("--appendonly") + 1] == "yes"

    mounts = []
    for volume in redis.get("volumes", []):
        if isinstance(volume, str):
            source, _, target = volume.partition(":")
            mounts.append((source, target.split(":")[0]))
        else:
            mounts.append((volume.get("source"), volume.get("target")))
    sources = [source for source, target in mounts if target == "/data"]
    assert sources, "redis must mount a volume at /data"
    assert sources[0] in (compose.get("volumes") or {}), "/data must be a named volume"


def test_redis_has_a_healthcheck(services: dict[str, Any]) -> None:
    test = argv(services["redis"]["healthcheck"]["test"])
    assert "redis-cli" in " ".join(test) and "ping" in test


def test_worker_runs_aeon_worker(services: dict[str, Any]) -> None:
    worker = services["worker"]
    args = argv(worker.get("entrypoint")) + argv(worker.get("command"))
    assert aeon_subcommand(args) == "worker", args


def test_worker_can_scale(services: dict[str, Any]) -> None:
    worker = services["worker"]
    assert "container_name" not in worker
    assert not worker.get("ports"), "host ports would collide between replicas"
    assert "build" in worker


def test_worker_waits_for_redis_and_restarts(services: dict[str, Any]) -> None:
    worker = services["worker"]
    assert worker["depends_on"]["redis"]["condition"] == "service_healthy"
    assert worker["restart"] == "unless-stopped"


def test_worker_gets_time_to_finish_in_flight_events(services: dict[str, Any]) -> None:
    from bus.settings import BusSettings

    grace = duration_s(services["worker"]["stop_grace_period"])
    # Compose must wait longer than the worker's own drain before it sends SIGKILL.
    assert grace > BusSettings().shutdown_grace_s
    assert services["worker"].get("stop_signal", "SIGTERM") == "SIGTERM"


def test_gateway_is_a_cli_service(services: dict[str, Any]) -> None:
    gateway = services["gateway"]
    assert gateway.get("profiles"), "a profile keeps `docker compose up` from starting it"
    args = argv(gateway.get("entrypoint")) + argv(gateway.get("command"))
    assert args and Path(args[0]).name == "aeon", args
    assert "container_name" not in gateway


@pytest.mark.parametrize("name", ["worker", "gateway"])
def test_aeon_services_use_the_compose_redis(services: dict[str, Any], name: str) -> None:
    env = environment(services[name])
    url = urlsplit(env["AEON_REDIS_URL"])
    assert url.scheme == "redis"
    assert url.hostname == "redis" and url.hostname in services
    assert (url.port or 6379) == 6379


@pytest.mark.parametrize("name", ["worker", "gateway"])
def test_llm_settings_pass_through(services: dict[str, Any], name: str) -> None:
    env = environment(services[name])
    for var in LLM_VARS:
        assert re.fullmatch(rf"\$\{{{var}(:-[^}}]*)?\}}", env.get(var, "")), (var, env.get(var))


# --------------------------------------------------------------------------- Dockerfile


def test_dockerfile_base_and_user() -> None:
    stage = final_stage()
    assert stage[0][1].split()[0] == "python:3.11-slim"
    users = [args for name, args in stage if name == "USER"]
    assert users, "the runtime stage must switch to a non-root user"
    assert users[-1].split(":")[0] not in {"root", "0"}


def test_dockerfile_copies_the_project() -> None:
    sources = copy_sources()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    needed = {"pyproject.toml", pyproject["project"]["readme"], *project_packages()}
    assert needed <= set(sources), f"not copied: {sorted(needed - set(sources))}"


def test_dockerfile_installs_the_project() -> None:
    runs = [args for name, args in dockerfile_instructions() if name == "RUN"]
    installs = [
        run
        for run in runs
        if re.search(r"\bpip (install|wheel)\b", run) and re.search(r"(^|\s)\.(\s|$)", run)
    ]
    assert installs, "no `pip install .` (or `pip wheel .`) of the project"


def test_dockerfile_default_command_is_aeon_worker() -> None:
    entrypoint: list[str] = []
    cmd: list[str] = []
    for name, args in final_stage():
        if name == "ENTRYPOINT":
            entrypoint = split_args(args)
        elif name == "CMD":
            cmd = split_args(args)
    assert aeon_subcommand(entrypoint + cmd) == "worker"


@pytest.mark.parametrize("source", copy_sources() if DOCKERFILE.exists() else [])
def test_every_copied_path_exists(source: str) -> None:
    assert (ROOT / source).exists(), f"Dockerfile copies {source}, which is not in the repo"


def test_dockerignore_keeps_what_the_dockerfile_copies() -> None:
    patterns = [
        line.strip().removeprefix("/")
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert not any(p.startswith("!") for p in patterns), "update this test for ! exceptions"
    for source in copy_sources():
        parts = Path(source).parts
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        for pattern in patterns:
            hit = [p for p in prefixes if fnmatch.fnmatch(p, pattern.removeprefix("**/"))]
            assert not hit, f".dockerignore pattern {pattern!r} excludes {source}"
    assert ".git" in patterns and ".env" in patterns, "keep history and secrets out of builds"
