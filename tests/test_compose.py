"""compose.yaml, compose.cluster.yaml and the Dockerfile say what the docs promise
(docs/operating.md, docs/redis-cluster.md), checked without a Docker engine.

- Redis persists (AOF on a named volume) and reports health; workers wait for it.
- `docker compose up --scale worker=N` works: no container_name, no host ports on the worker.
- Workers and the gateway run real `aeon` commands against the compose Redis.
- The cluster file: six persistent cluster nodes that announce names workers can resolve and
  keep fixed addresses; a one-shot init that makes them one cluster (and leaves an existing one
  alone), run here against a stand-in redis-cli; workers that wait for it, with AEON_SHARDS
  equal to the number of masters and AEON_WAIT_REPLICAS=1.
- The image installs the project, every package of it and its otel extra, from files that exist
  and are not dockerignored.
- The observability profile (off for plain `docker compose up`): Prometheus finds every worker
  by DNS at the port the workers serve /metrics on; Grafana is provisioned with that Prometheus
  and a dashboard whose every query names metrics telemetry/metrics.py defines, grouped by labels
  they have; traces are off by default and, when on, go to Jaeger's OTLP/HTTP port.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import ipaddress
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "compose.yaml"
CLUSTER_COMPOSE = ROOT / "compose.cluster.yaml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
PROMETHEUS_CONFIG = ROOT / "deploy" / "prometheus.yml"
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "aeon.json"
METRICS_SOURCE = ROOT / "telemetry" / "metrics.py"
OBSERVABILITY = ("prometheus", "grafana", "jaeger")
#: OTLP over HTTP (the exporter Aeon uses: http/protobuf); 4317 is gRPC.
OTLP_HTTP_PORT = 4318
LLM_VARS = ("AEON_LLM", "AEON_LLM_BASE_URL", "AEON_LLM_MODEL", "AEON_LLM_API_KEY")


# --------------------------------------------------------------------------- helpers


@functools.cache
def load_compose(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose(COMPOSE)


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


@pytest.fixture(scope="module", params=[COMPOSE, CLUSTER_COMPOSE], ids=lambda path: path.name)
def aeon_services(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The services of each compose file: what holds for the worker and gateway of both."""
    return load_compose(request.param)["services"]


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


def redis_options(args: list[str]) -> dict[str, str]:
    """`redis-server --name value ...` → {name: value} (a flag's words joined, "" for none)."""
    assert args and args[0] == "redis-server", args
    options: dict[str, list[str]] = {}
    name = None
    for arg in args[1:]:
        if arg.startswith("--"):
            name = arg.removeprefix("--")
            assert name not in options, f"--{name} given twice"
            options[name] = []
        else:
            assert name is not None, f"{arg!r} before any --option"
            options[name].append(arg)
    return {key: " ".join(words) for key, words in options.items()}


def data_volume(compose: dict[str, Any], service: dict[str, Any]) -> str:
    """The named volume `service` mounts at /data (failing when it is none)."""
    mounts = []
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, _, target = volume.partition(":")
            mounts.append((source, target.split(":")[0]))
        else:
            mounts.append((volume.get("source"), volume.get("target")))
    sources = [source for source, target in mounts if target == "/data"]
    assert sources, "redis must mount a volume at /data"
    assert sources[0] in (compose.get("volumes") or {}), "/data must be a named volume"
    return sources[0]


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
    """Top-level folders pyproject.toml ships: the first part of each subpackage of `aeonloop`
    (tool.setuptools.packages; the repository's root is the package's)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = pyproject["tool"]["setuptools"]["packages"]
    return sorted({name.split(".")[1] for name in packages if name.count(".") >= 1})


def packages_on_disk() -> list[str]:
    """Top-level directories that are import packages (an __init__.py); tests/ and bench/ are
    not part of the product (bench/ stays out of the wheel on purpose)."""
    return sorted(
        path.parent.name
        for path in ROOT.glob("*/__init__.py")
        if not path.parent.name.startswith(".") and path.parent.name not in {"tests", "bench"}
    )


def root_modules() -> list[str]:
    """The package's own modules at the repository's root (`aeonloop/__init__.py`, ...)."""
    return sorted(path.name for path in ROOT.glob("*.py"))


#: pip options whose value is the next word.
_PIP_VALUED = {
    "-w",
    "--wheel-dir",
    "-f",
    "--find-links",
    "-r",
    "--requirement",
    "-c",
    "--constraint",
    "-i",
    "--index-url",
    "--extra-index-url",
    "-t",
    "--target",
}


def pip_calls(instructions: list[tuple[str, str]]) -> list[tuple[str, list[str], list[str]]]:
    """Each `pip <subcommand>` the RUN instructions make: (subcommand, options, requirements)."""
    calls = []
    for name, args in instructions:
        if name != "RUN":
            continue
        words = shlex.split(args)
        commands: list[list[str]] = [[]]
        for word in words:
            if word in {"&&", "||", ";"}:
                commands.append([])
            else:
                commands[-1].append(word)
        for command in commands:
            # `pip`, `pip3` or `python -m pip`; an option (RUN --mount=...,target=/root/.cache/pip)
            # is no command.
            at = [
                i
                for i, word in enumerate(command)
                if not word.startswith("-") and Path(word).name in {"pip", "pip3"}
            ]
            if not at or at[0] + 1 >= len(command):
                continue
            rest = command[at[0] + 1 :]
            options, requirements = [], []
            words_iter = iter(rest[1:])
            for word in words_iter:
                if word in _PIP_VALUED:
                    options.append(f"{word}={next(words_iter)}")
                elif word.startswith("-"):
                    options.append(word)
                else:
                    requirements.append(word)
            calls.append((rest[0], options, requirements))
    return calls


def requirement(spec: str) -> tuple[str, set[str]]:
    """`name[extra,...]` (or `.[extra]`, a path) → (name, extras)."""
    match = re.fullmatch(r"([^\[\]]+)(?:\[([^\]]*)\])?", spec)
    assert match, f"cannot read requirement {spec!r}"
    extras = {extra.strip() for extra in (match[2] or "").split(",") if extra.strip()}
    return match[1], extras


def compose_default(value: str) -> tuple[str, str]:
    """`${VAR:-default}` → (VAR, default), failing for anything else."""
    match = re.fullmatch(r"\$\{([A-Z0-9_]+):-([^}]*)\}", value)
    assert match, f"{value!r} is not ${{VAR:-default}}"
    return match[1], match[2]


def bind_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """A service's bind mounts from the project directory: container path → host path."""
    mounts = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, _, rest = volume.partition(":")
            target = rest.split(":")[0]
        else:
            source, target = volume.get("source", ""), volume.get("target", "")
        if source.startswith(("./", "../", "/")):
            mounts[target] = (ROOT / source).resolve()
    return mounts


def published(service: dict[str, Any]) -> dict[int, int]:
    """A service's published ports: container port → host port (short or long syntax)."""
    ports = {}
    for port in service.get("ports", []):
        if isinstance(port, dict):
            ports[int(port["target"])] = int(port["published"])
            continue
        parts = str(port).split("/")[0].split(":")
        assert len(parts) in {2, 3}, f"{port!r}: publish host:container"
        ports[int(parts[-1])] = int(parts[-2])
    return ports


def image_tag(image: str) -> tuple[str, str]:
    """`repo[:tag]` → (repo, tag or "")."""
    repo, _, tag = image.rpartition(":") if ":" in image.split("/")[-1] else (image, "", "")
    return repo, tag


@functools.cache
def defined_metrics() -> dict[str, tuple[str, tuple[str, ...]]]:
    """What telemetry/metrics.py defines: each name as exported (counters with _total,
    histograms with _bucket, _sum and _count) → (family, its labels)."""
    kinds = {"Counter": ("_total",), "Gauge": ("",), "Histogram": ("_bucket", "_sum", "_count")}
    names: dict[str, tuple[str, tuple[str, ...]]] = {}
    for node in ast.walk(ast.parse(METRICS_SOURCE.read_text())):
        if not (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in kinds
        ):
            continue
        assert node.args and isinstance(node.args[0], ast.Constant), ast.dump(node)
        family = str(node.args[0].value).removesuffix("_total")
        labels_node = node.args[2] if len(node.args) > 2 else None
        for keyword in node.keywords:
            if keyword.arg == "labelnames":
                labels_node = keyword.value
        labels = tuple(ast.literal_eval(labels_node)) if labels_node is not None else ()
        for suffix in kinds[node.func.id]:
            names[family + suffix] = (family, labels)
    assert names, f"no Counter/Gauge/Histogram found in {METRICS_SOURCE}"
    return names


@functools.cache
def load_dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def all_panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every panel, those inside (collapsed) rows too."""
    found = []
    for panel in panels:
        found.append(panel)
        found.extend(all_panels(panel.get("panels", [])))
    return found


def dashboard_exprs() -> list[str]:
    return [
        target["expr"]
        for panel in all_panels(load_dashboard()["panels"])
        for target in panel.get("targets", [])
        if target.get("expr")
    ]


# --------------------------------------------------------------------------- compose.yaml


def test_services_exist(services: dict[str, Any]) -> None:
    assert {"redis", "worker", "gateway"} <= set(services)


def test_redis_persists_to_a_named_volume(compose: dict[str, Any], services) -> None:
    redis = services["redis"]
    assert str(redis["image"]).startswith("redis:7")
    assert redis_options(argv(redis.get("command"))).get("appendonly") == "yes"
    data_volume(compose, redis)


def test_redis_has_a_healthcheck(services: dict[str, Any]) -> None:
    test = argv(services["redis"]["healthcheck"]["test"])
    assert "redis-cli" in " ".join(test) and "ping" in test


def test_worker_runs_aeon_worker(aeon_services: dict[str, Any]) -> None:
    worker = aeon_services["worker"]
    args = argv(worker.get("entrypoint")) + argv(worker.get("command"))
    assert aeon_subcommand(args) == "worker", args


def test_worker_can_scale(aeon_services: dict[str, Any]) -> None:
    worker = aeon_services["worker"]
    assert "container_name" not in worker
    assert not worker.get("ports"), "host ports would collide between replicas"
    assert "build" in worker


def test_worker_waits_for_redis_and_restarts(services: dict[str, Any]) -> None:
    worker = services["worker"]
    assert worker["depends_on"]["redis"]["condition"] == "service_healthy"
    assert worker["restart"] == "unless-stopped"


def test_worker_gets_time_to_finish_in_flight_events(aeon_services: dict[str, Any]) -> None:
    from aeonloop.bus.settings import BusSettings

    grace = duration_s(aeon_services["worker"]["stop_grace_period"])
    # Compose must wait longer than the worker's own drain before it sends SIGKILL.
    assert grace > BusSettings().shutdown_grace_s
    assert aeon_services["worker"].get("stop_signal", "SIGTERM") == "SIGTERM"


def test_gateway_is_a_cli_service(aeon_services: dict[str, Any]) -> None:
    gateway = aeon_services["gateway"]
    assert "cli" in gateway.get("profiles", []), (
        "a profile keeps `docker compose up` from starting it"
    )
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
def test_llm_settings_pass_through(aeon_services: dict[str, Any], name: str) -> None:
    env = environment(aeon_services[name])
    for var in LLM_VARS:
        assert re.fullmatch(rf"\$\{{{var}(:-[^}}]*)?\}}", env.get(var, "")), (var, env.get(var))


# --------------------------------------------------------------------------- observability


@pytest.fixture(scope="module")
def prometheus_config() -> dict[str, Any]:
    return yaml.safe_load(PROMETHEUS_CONFIG.read_text())


@pytest.fixture(scope="module")
def datasources() -> list[dict[str, Any]]:
    return yaml.safe_load((GRAFANA / "provisioning/datasources/datasource.yml").read_text())[
        "datasources"
    ]


def test_observability_is_an_opt_in_profile(services: dict[str, Any]) -> None:
    for name in OBSERVABILITY:
        assert services[name].get("profiles") == ["observability"], name
    # `docker compose up` starts the services without a profile: those must not need these.
    default = {name for name, service in services.items() if not service.get("profiles")}
    assert {"redis", "worker"} <= default
    assert not default & set(OBSERVABILITY)
    for name in default:
        needs = services[name].get("depends_on") or {}
        assert not set(needs) & set(OBSERVABILITY), f"{name} would pull in {sorted(needs)}"


@pytest.mark.parametrize("name", OBSERVABILITY)
def test_observability_images_are_pinned(services: dict[str, Any], name: str) -> None:
    image = str(services[name]["image"])
    repo, tag = image_tag(image)
    assert repo and tag, f"{name}: {image!r} has no tag"
    assert tag != "latest" and re.search(r"\d+\.\d+", tag), f"{name}: pin a version, not {tag!r}"


@pytest.mark.parametrize("name", OBSERVABILITY)
def test_observability_bind_mounts_exist(services: dict[str, Any], name: str) -> None:
    for target, source in bind_mounts(services[name]).items():
        assert source.exists(), f"{name} mounts {source}, which does not exist, at {target}"
        assert ROOT in source.parents, f"{name} mounts {source} from outside the project"


def test_workers_serve_metrics_where_prometheus_scrapes(
    services: dict[str, Any], prometheus_config: dict[str, Any], monkeypatch
) -> None:
    from aeonloop.telemetry.metrics import MetricsSettings

    env = environment(services["worker"])
    for var in [var for var in os.environ if var.upper().startswith("AEON_")]:
        monkeypatch.delenv(var)
    for var, value in env.items():
        if var.startswith("AEON_") and "${" not in value:
            monkeypatch.setenv(var, value)
    settings = MetricsSettings.from_env()
    assert settings.metrics_port is not None, "workers must serve /metrics (AEON_METRICS_PORT)"
    assert settings.metrics_host in {"0.0.0.0", "::", ""}, "prometheus scrapes from elsewhere"

    sd = [
        (job, config)
        for job in prometheus_config["scrape_configs"]
        for config in job.get("dns_sd_configs", [])
        if "worker" in config.get("names", [])
    ]
    assert len(sd) == 1, "one dns_sd_configs entry must find the `worker` containers"
    ((job, config),) = sd
    # Compose's DNS answers the service name with an A record per replica (and no SRV).
    assert config.get("type") == "A"
    assert config.get("port") == settings.metrics_port
    assert job.get("metrics_path", "/metrics") == "/metrics"
    assert job.get("scheme", "http") == "http"


def test_the_api_serves_the_page_and_metrics_where_prometheus_scrapes(
    services: dict[str, Any], prometheus_config: dict[str, Any], monkeypatch
) -> None:
    from aeonloop.gateway.http.settings import HttpSettings

    api = services["api"]
    assert not api.get("profiles"), "`docker compose up` starts the API"
    command = api["command"]
    assert command[:2] == ["aeon", "serve"]
    host, port = command[command.index("--host") + 1], command[command.index("--port") + 1]
    assert host == "0.0.0.0", "published ports reach only a server listening on every address"
    assert f"{port}:{port}" in api["ports"]
    for var in [var for var in os.environ if var.upper().startswith("AEON_")]:
        monkeypatch.delenv(var)
    for var, value in environment(api).items():
        if var.startswith("AEON_") and "${" not in value:
            monkeypatch.setenv(var, value)
    allowed = HttpSettings.from_env().with_(http_host=host).allowed_hosts()
    targets = [
        target
        for job in prometheus_config["scrape_configs"]
        for config in job.get("static_configs", [])
        for target in config["targets"]
        if target.endswith(f":{port}")
    ]
    assert targets == [f"api:{port}"], targets
    assert "api" in allowed, "the API must answer the Host name Prometheus scrapes it by"
    assert "localhost" in allowed, "and the one a browser on the host uses"


def test_prometheus_reads_deploy_prometheus_yml(services: dict[str, Any]) -> None:
    prometheus = services["prometheus"]
    flags = dict(
        arg.removeprefix("--").split("=", 1)
        for arg in argv(prometheus.get("command"))
        if arg.startswith("--") and "=" in arg
    )
    config_path = flags.get("config.file", "/etc/prometheus/prometheus.yml")
    assert bind_mounts(prometheus).get(config_path) == PROMETHEUS_CONFIG.resolve()
    assert published(prometheus) == {9090: 9090}


def test_traces_are_off_by_default_and_go_to_jaeger(services: dict[str, Any]) -> None:
    service_names = set()
    for name in ("worker", "gateway"):
        env = environment(services[name])
        # Opt-in, and never blank: without OTEL_TRACES_EXPORTER, Aeon takes a set OTLP endpoint
        # as a request to trace (telemetry/tracing.py).
        assert compose_default(env["OTEL_TRACES_EXPORTER"]) == ("OTEL_TRACES_EXPORTER", "none")
        var, endpoint = compose_default(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
        assert var == "OTEL_EXPORTER_OTLP_ENDPOINT"
        url = urlsplit(endpoint)
        assert url.scheme == "http" and url.hostname == "jaeger" and url.hostname in services
        assert url.port == OTLP_HTTP_PORT, "Aeon exports OTLP http/protobuf: Jaeger's 4318"
        assert url.path in {"", "/"}, "the exporter adds /v1/traces to the base endpoint"
        assert env.get("OTEL_SERVICE_NAME"), name
        service_names.add(env["OTEL_SERVICE_NAME"])
    assert len(service_names) == 2, "workers and the gateway must be told apart in Jaeger"


def test_jaeger_receives_otlp_and_shows_its_ui(services: dict[str, Any]) -> None:
    jaeger = services["jaeger"]
    repo, tag = image_tag(str(jaeger["image"]))
    assert repo.endswith("jaegertracing/all-in-one"), repo
    env = environment(jaeger)
    assert env.get("COLLECTOR_OTLP_ENABLED", "true").lower() == "true"
    version = tuple(int(part) for part in re.findall(r"\d+", tag)[:2])
    # Before 1.46 the OTLP receiver had to be switched on (COLLECTOR_OTLP_ENABLED=true).
    assert version >= (1, 46) or "COLLECTOR_OTLP_ENABLED" in env, tag
    assert published(jaeger) == {16686: 16686}


def test_grafana_is_provisioned_from_deploy(services: dict[str, Any], datasources) -> None:
    grafana = services["grafana"]
    mounts = bind_mounts(grafana)
    assert mounts.get("/etc/grafana/provisioning") == (GRAFANA / "provisioning").resolve()
    assert published(grafana) == {3000: 3000}
    env = environment(grafana)
    anonymous = env.get("GF_AUTH_ANONYMOUS_ENABLED") == "true"
    assert anonymous or env.get("GF_SECURITY_ADMIN_PASSWORD"), "how does anyone get in?"
    if anonymous:
        assert env.get("GF_AUTH_ANONYMOUS_ORG_ROLE", "Viewer") == "Viewer", "viewers, not editors"

    (prometheus,) = [source for source in datasources if source["type"] == "prometheus"]
    url = urlsplit(prometheus["url"])
    assert url.hostname == "prometheus" and url.hostname in services
    assert url.port in published(services["prometheus"]), "prometheus listens on 9090"

    providers = yaml.safe_load((GRAFANA / "provisioning/dashboards/dashboards.yml").read_text())
    paths = [provider["options"]["path"] for provider in providers["providers"]]
    assert any(mounts.get(path) == DASHBOARD.parent.resolve() for path in paths), (
        f"no provider loads {DASHBOARD.parent} (mounted: {mounts}, providers: {paths})"
    )
    home = env.get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    if home:
        folder, _, file = home.rpartition("/")
        assert mounts.get(folder, Path("/nonexistent")) / file == DASHBOARD.resolve(), home


def test_compose_header_says_how_to_observe(services: dict[str, Any]) -> None:
    header = "\n".join(line for line in COMPOSE.read_text().splitlines() if line.startswith("#"))
    assert "OTEL_TRACES_EXPORTER=otlp docker compose --profile observability up -d" in header
    for name in OBSERVABILITY:
        (host_port,) = published(services[name]).values()
        assert f"localhost:{host_port}" in header, f"say where {name} is"


def test_dashboard_uses_the_provisioned_datasource(datasources: list[dict[str, Any]]) -> None:
    dashboard = load_dashboard()
    assert dashboard["uid"] == "aeon"
    assert 36 <= dashboard["schemaVersion"] <= 41
    uids = {source["uid"] for source in datasources}
    panels = all_panels(dashboard["panels"])
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    queried = [panel for panel in panels if panel.get("targets")]
    assert queried
    for panel in queried:
        assert panel["datasource"]["uid"] in uids, panel["title"]
        for target in panel["targets"]:
            assert target.get("datasource", panel["datasource"])["uid"] in uids, panel["title"]
    rows = {panel["title"] for panel in panels if panel["type"] == "row"}
    assert {"Throughput", "Latency", "LLM", "Backlog", "Workers"} <= rows


def test_dashboard_queries_only_metrics_the_code_defines() -> None:
    defined = defined_metrics()
    used = {name for expr in dashboard_exprs() for name in re.findall(r"\baeon_[a-z_]+", expr)}
    assert used, "the dashboard queries no aeon_ metric"
    assert used <= set(defined), f"not in telemetry/metrics.py: {sorted(used - set(defined))}"


def test_dashboard_shows_every_metric_the_code_defines() -> None:
    shown = {
        defined_metrics()[name][0]
        for expr in dashboard_exprs()
        for name in re.findall(r"\baeon_[a-z_]+", expr)
        if name in defined_metrics()
    }
    families = {family for family, _ in defined_metrics().values()}
    assert families <= shown, f"on no panel: {sorted(families - shown)}"


def test_dashboard_process_metrics_exist() -> None:
    import prometheus_client

    exported = {
        sample.name for family in prometheus_client.REGISTRY.collect() for sample in family.samples
    }
    used = {
        name
        for expr in dashboard_exprs()
        for name in re.findall(r"\b(?:process|python)_[a-z_]+", expr)
    }
    if not any(name.startswith("process_") for name in exported):
        pytest.skip("no process collector on this platform")
    assert used <= exported, f"prometheus-client exports none of {sorted(used - exported)}"


def test_dashboard_groups_by_labels_the_metrics_have() -> None:
    # Target labels Prometheus adds to every series it scrapes.
    target_labels = {"instance", "job"}
    for expr in dashboard_exprs():
        metrics = [
            name for name in re.findall(r"\baeon_[a-z_]+", expr) if name in defined_metrics()
        ]
        for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
            labels = {label.strip() for label in group.split(",") if label.strip()}
            for name in metrics:
                has = set(defined_metrics()[name][1]) | target_labels
                if name.endswith("_bucket"):
                    has.add("le")
                assert labels <= has, f"{expr}: {name} has no {sorted(labels - has)}"


def test_dashboard_jobs_are_scraped(prometheus_config: dict[str, Any]) -> None:
    jobs = {job["job_name"] for job in prometheus_config["scrape_configs"]}
    for expr in dashboard_exprs():
        for job in re.findall(r'\bjob\s*=~?\s*"([^"]*)"', expr):
            assert job in jobs, f"{expr}: prometheus.yml has no job {job!r}"


# --------------------------------------------------------------------------- compose.cluster.yaml

#: What compose.yaml's redis promises about data, which every cluster node must promise too.
PERSISTENCE = {
    "appendonly": "yes",
    "appendfsync": "everysec",
    "save": "",
    "maxmemory-policy": "noeviction",
}


@pytest.fixture(scope="module")
def cluster_compose() -> dict[str, Any]:
    return load_compose(CLUSTER_COMPOSE)


@pytest.fixture(scope="module")
def cluster_services(cluster_compose: dict[str, Any]) -> dict[str, Any]:
    return cluster_compose["services"]


@pytest.fixture(scope="module")
def nodes(cluster_services: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Each Redis node's service name → its redis-server options."""
    return {
        name: redis_options(args)
        for name, service in cluster_services.items()
        if (args := argv(service.get("entrypoint")) + argv(service.get("command")))
        and args[0] == "redis-server"
    }


def node_port(options: dict[str, str]) -> int:
    return int(options.get("port", 6379))


def compose_unescape(text: str) -> str:
    """`text` as the container gets it: Compose turns `$$` into `$`, and would replace any other
    `$name` with the value of a variable on the host running Compose (blank, usually)."""
    pieces = text.split("$$")
    assert not any("$" in piece for piece in pieces), f"a lone $ in {text!r}: write $$"
    return "$".join(pieces)


@pytest.fixture(scope="module")
def init(cluster_services: dict[str, Any]) -> tuple[str, list[str]]:
    """The init service's name and its argv as the container gets it: [shell, flags, script]."""
    found = {
        name: args
        for name, service in cluster_services.items()
        if "--cluster create"
        in " ".join(args := argv(service.get("entrypoint")) + argv(service.get("command")))
    }
    assert len(found) == 1, (
        f"one service must run `redis-cli --cluster create`, not {sorted(found)}"
    )
    ((name, args),) = found.items()
    assert Path(args[0]).name in {"sh", "bash"} and len(args) == 3 and "c" in args[1], args
    return name, [*args[:2], compose_unescape(args[2])]


@pytest.fixture(scope="module")
def create(init: tuple[str, list[str]]) -> tuple[list[str], int]:
    """The init script's `redis-cli --cluster create` call: its host:port list and replicas."""
    script = re.sub(r"\\\n", " ", init[1][2])  # continued lines joined
    lines = [line for line in script.splitlines() if "--cluster create" in line]
    assert len(lines) == 1, lines
    args = shlex.split(lines[0])
    args = args[args.index("redis-cli") :]
    assert args[1:3] == ["--cluster", "create"], args
    addresses = []
    for arg in args[3:]:
        if arg.startswith("-"):
            break
        addresses.append(arg)
    assert "--cluster-yes" in args, "without --cluster-yes redis-cli waits for a typed `yes`"
    assert "--cluster-replicas" in args, "without replicas a dead master loses its slots' data"
    return addresses, int(args[args.index("--cluster-replicas") + 1])


def masters(nodes: dict[str, dict[str, str]], replicas: int) -> int:
    assert len(nodes) % (1 + replicas) == 0, f"{len(nodes)} nodes, {replicas} replicas a master"
    return len(nodes) // (1 + replicas)


def test_cluster_is_a_project_of_its_own(compose: dict[str, Any], cluster_compose) -> None:
    # Without a name of its own, the cluster file would share compose.yaml's project (the
    # directory's name): its worker and gateway would replace compose.yaml's containers.
    assert cluster_compose.get("name") not in {None, compose.get("name", ROOT.name)}


def test_cluster_has_six_redis_7_nodes(cluster_services: dict[str, Any], nodes) -> None:
    assert len(nodes) == 6, sorted(nodes)
    for name in nodes:
        assert str(cluster_services[name]["image"]).startswith("redis:7"), name  # hostnames: 7.0


def test_cluster_nodes_are_cluster_enabled_and_persist(
    cluster_compose: dict[str, Any], cluster_services, nodes, services
) -> None:
    single = redis_options(argv(services["redis"]["command"]))
    volumes = []
    for name, options in nodes.items():
        assert options.get("cluster-enabled") == "yes", name
        assert options.get("cluster-config-file"), name
        assert 1000 <= int(options.get("cluster-node-timeout", 15000)) <= 15000, name
        for key, value in PERSISTENCE.items():
            assert options.get(key) == value == single.get(key), (name, key, options.get(key))
        volumes.append(data_volume(cluster_compose, cluster_services[name]))
    # nodes.conf lives in /data too: two nodes on one volume would take each other's identity.
    assert len(set(volumes)) == len(nodes), volumes


def test_cluster_nodes_are_configured_alike(nodes: dict[str, dict[str, str]]) -> None:
    own = "cluster-announce-hostname"
    shared = [{k: v for k, v in options.items() if k != own} for options in nodes.values()]
    assert all(options == shared[0] for options in shared), "the six copies have drifted apart"


def test_cluster_nodes_announce_their_service_names(nodes: dict[str, dict[str, str]]) -> None:
    # CLUSTER SLOTS and MOVED then name hosts the workers resolve (Compose's DNS), rather than
    # an address a node guessed for itself.
    for name, options in nodes.items():
        assert options.get("cluster-announce-hostname") == name, name
        assert options.get("cluster-preferred-endpoint-type") == "hostname", name


def test_cluster_nodes_keep_fixed_addresses(cluster_compose: dict[str, Any], nodes) -> None:
    # Nodes find each other (cluster bus, replication) by the IPs in their nodes.conf; IPs that
    # Docker hands out afresh at a restart could swap between nodes and split the cluster.
    (ipam,) = cluster_compose["networks"]["default"]["ipam"]["config"]
    subnet = ipaddress.ip_network(ipam["subnet"])
    dynamic = ipaddress.ip_network(ipam["ip_range"])
    assert dynamic.subnet_of(subnet)
    addresses = []
    for name in nodes:
        networks = cluster_compose["services"][name]["networks"]
        assert list(networks) == ["default"], name
        address = ipaddress.ip_address(networks["default"]["ipv4_address"])
        assert address in subnet and address not in dynamic, (name, address)
        gateway = ipaddress.ip_address(ipam.get("gateway", subnet.network_address + 1))
        assert address not in {subnet.network_address, subnet.broadcast_address, gateway}, name
        addresses.append(address)
    assert len(set(addresses)) == len(nodes), addresses


def test_cluster_nodes_report_health_and_stay_inside(
    cluster_services: dict[str, Any], nodes
) -> None:
    for name in nodes:
        node = cluster_services[name]
        test = argv(node["healthcheck"]["test"])
        assert "redis-cli" in " ".join(test) and "ping" in test, name
        assert node["restart"] == "unless-stopped", name
        # A client on the host would be redirected to service names it cannot resolve.
        assert not node.get("ports"), name


def test_cluster_init_creates_a_cluster_of_every_node_with_replicas(
    cluster_services: dict[str, Any], nodes, init, create
) -> None:
    addresses, replicas = create
    assert sorted(addresses) == sorted(f"{name}:{node_port(o)}" for name, o in nodes.items())
    assert replicas == 1
    assert masters(nodes, replicas) >= 3, "redis-cli refuses a cluster of fewer than 3 masters"
    service = cluster_services[init[0]]
    assert str(service["image"]).startswith("redis:7"), "Redis 7's redis-cli resolves hostnames"
    for name in nodes:
        assert service["depends_on"][name]["condition"] == "service_healthy", name
    # A one-shot: one that restarts never completes, and workers would wait for it forever.
    assert service.get("restart", "no") == "no"


@pytest.mark.parametrize("name", ["worker", "gateway"])
def test_cluster_clients_wait_for_the_cluster(
    cluster_services: dict[str, Any], init, name: str
) -> None:
    service = cluster_services[name]
    assert service["depends_on"][init[0]]["condition"] == "service_completed_successfully"
    if name == "worker":
        assert service["restart"] == "unless-stopped"


@pytest.mark.parametrize("name", ["worker", "gateway"])
def test_cluster_clients_use_the_cluster(
    cluster_services: dict[str, Any], nodes, create, name: str, monkeypatch
) -> None:
    from aeonloop.bus.settings import BusSettings

    env = environment(cluster_services[name])
    url = urlsplit(env["AEON_REDIS_URL"])
    assert url.scheme == "redis" and url.hostname in nodes, env["AEON_REDIS_URL"]
    assert (url.port or 6379) == node_port(nodes[url.hostname])
    assert url.path in {"", "/", "/0"}, "a cluster has database 0 only"

    # What the process reads from that environment (the host's variables left out).
    for var in [var for var in os.environ if var.upper().startswith("AEON_")]:
        monkeypatch.delenv(var)
    for var, value in env.items():
        if "${" not in value:
            monkeypatch.setenv(var, value)
    settings = BusSettings.from_env()
    assert settings.redis_cluster in {"yes", "auto"}
    assert settings.shards == masters(nodes, create[1]), "one shard a master"
    assert settings.wait_replicas == 1, "a failover must not lose an accepted request"


def test_cluster_clients_build_compose_yamls_image(services: dict[str, Any], cluster_services):
    for name in ("worker", "gateway"):
        assert cluster_services[name]["build"] == services["worker"]["build"], name
        assert cluster_services[name]["image"] == services["worker"]["image"], name


# The init script, run by the local shell against a stand-in for redis-cli that answers
# CLUSTER INFO from a state file and records every call, and a `sleep` that records how long it
# was asked to sleep and returns at once.
_FAKE_REDIS_CLI = """\
import json, os, sys
args, state_file = sys.argv[1:], os.path.join(os.environ["FAKE_DIR"], "state.json")
state = json.load(open(state_file))
state["calls"].append(args)
code = 0
if args[:2] == ["--cluster", "create"]:
    if state["create_fails"]:
        code = 1
    else:
        state.update(ok=True, known=len([a for a in args[2:] if ":" in a]))
elif [arg.lower() for arg in args[-2:]] == ["cluster", "info"]:
    state["polls"] += 1
    ok = state["ok"] or state["polls"] > state["ok_after"]
    sys.stdout.write(
        f"cluster_enabled:1\\r\\ncluster_state:{'ok' if ok else 'fail'}\\r\\n"
        f"cluster_known_nodes:{state['known']}\\r\\ncluster_size:3\\r\\n"
    )
else:
    code = 2
json.dump(state, open(state_file, "w"))
sys.exit(code)
"""


def run_init(
    init: tuple[str, list[str]], tmp_path: Path, **state: Any
) -> tuple[int, list[list[str]], float, str]:
    """Run the init script as its container would: its exit code, redis-cli calls, seconds
    slept and output."""
    if shutil.which("sh") is None:
        pytest.skip("no sh")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "redis-cli").write_text(f"#!{sys.executable}\n{_FAKE_REDIS_CLI}")
    (bin_dir / "sleep").write_text('#!/bin/sh\necho "$1" >> "$FAKE_DIR/slept"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    start = {"ok": False, "known": 1, "ok_after": 10**9, "create_fails": False, "polls": 0}
    (tmp_path / "state.json").write_text(json.dumps({**start, **state, "calls": []}))
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env["FAKE_DIR"] = str(tmp_path)
    done = subprocess.run(init[1], env=env, capture_output=True, text=True, timeout=60)
    calls = json.loads((tmp_path / "state.json").read_text())["calls"]
    slept_file = tmp_path / "slept"
    pauses = slept_file.read_text().split() if slept_file.exists() else []
    slept = sum(duration_s(pause if pause[-1].isalpha() else f"{pause}s") for pause in pauses)
    return done.returncode, calls, slept, done.stdout + done.stderr


def creates(calls: list[list[str]]) -> list[list[str]]:
    return [call for call in calls if call[:2] == ["--cluster", "create"]]


def polled(calls: list[list[str]]) -> set[str]:
    return {call[call.index("-h") + 1] for call in calls if "-h" in call}


def test_cluster_init_creates_the_cluster_on_fresh_nodes(init, create, nodes, tmp_path) -> None:
    code, calls, _, output = run_init(init, tmp_path)
    assert code == 0, output
    (call,) = creates(calls)
    assert [arg for arg in call[2:] if ":" in arg] == create[0]
    assert polled(calls) == set(nodes), "it must wait until every node, and only a node, is ok"


def test_cluster_init_leaves_an_existing_cluster_alone(init, nodes, tmp_path) -> None:
    code, calls, _, output = run_init(init, tmp_path, ok=True, known=len(nodes))
    assert code == 0, output
    assert not creates(calls)


def test_cluster_init_waits_for_a_restarted_cluster(init, nodes, tmp_path) -> None:
    # After a restart the nodes know each other but report fail until they reconnect.
    code, calls, slept, output = run_init(init, tmp_path, known=len(nodes), ok_after=4)
    assert code == 0, output
    assert not creates(calls), "creating a cluster over nodes that have one fails or worse"
    assert slept > 0, "polls without a pause give up before the nodes have reconnected"


@pytest.mark.parametrize("state", [{"create_fails": True}, {"known": 6}], ids=["create", "never"])
def test_cluster_init_fails_rather_than_letting_workers_start(init, tmp_path, state) -> None:
    code, _, slept, output = run_init(init, tmp_path, **state)
    assert code != 0, output
    if "known" in state:
        # Long enough for nodes to reconnect, or for a failover (cluster-node-timeout 5 s).
        assert 30 <= slept <= 300, f"gave up after {slept} s"


# --------------------------------------------------------------------------- Dockerfile


def test_dockerfile_base_and_user() -> None:
    stage = final_stage()
    assert stage[0][1].split()[0] == "python:3.11-slim"
    users = [args for name, args in stage if name == "USER"]
    assert users, "the runtime stage must switch to a non-root user"
    assert users[-1].split(":")[0] not in {"root", "0"}


def test_pyproject_ships_every_package() -> None:
    # A package left out of the include list is missing from the wheel, hence from the image.
    missing = sorted(set(packages_on_disk()) - set(project_packages()))
    assert not missing, f"pyproject.toml [tool.setuptools] packages leaves out {missing}"


def test_dockerfile_copies_the_project() -> None:
    sources = copy_sources()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    needed = {
        "pyproject.toml",
        pyproject["project"]["readme"],
        *project_packages(),
        *packages_on_disk(),
        *root_modules(),
    }
    assert needed <= set(sources), f"not copied: {sorted(needed - set(sources))}"


def test_dockerfile_installs_the_project() -> None:
    built = [
        requirement(spec)[0]
        for sub, _, specs in pip_calls(dockerfile_instructions())
        if sub in {"install", "wheel"}
        for spec in specs
    ]
    assert "." in built, "no `pip install .` (or `pip wheel .`) of the project"


def test_dockerfile_installs_the_otel_extra() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = pyproject["project"].get("optional-dependencies", {})
    otel = " ".join(extras.get("otel", []))
    assert "opentelemetry-sdk" in otel, "pyproject.toml needs an otel extra with the SDK"
    # compose.yaml sends traces to Jaeger's OTLP/HTTP port.
    assert "opentelemetry-exporter-otlp-proto-http" in otel

    wheels = [
        requirement(spec)[1]
        for sub, _, specs in pip_calls(dockerfile_instructions())
        if sub == "wheel"
        for spec in specs
        if requirement(spec)[0] == "."
    ]
    assert any("otel" in found for found in wheels), "build wheels for `.[otel]`"
    installs = [
        (options, requirement(spec))
        for sub, options, specs in pip_calls(final_stage())
        if sub == "install"
        for spec in specs
    ]
    name = pyproject["project"]["name"]
    otel_installs = [
        options for options, (req, found) in installs if req == name and "otel" in found
    ]
    assert otel_installs, f"the runtime stage must install {name}[otel]"
    # From the wheels built above, not from an index.
    assert all("--no-index" in options for options in otel_installs), otel_installs
    for _, (req, found) in installs:
        assert found <= set(extras), f"{req}: no such extra {sorted(found - set(extras))}"


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
