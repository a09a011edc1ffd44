"""compose.yaml, compose.cluster.yaml and the Dockerfile say what the README promises, checked
without a Docker engine.

- Redis persists (AOF on a named volume) and reports health; workers wait for it.
- `docker compose up --scale worker=N` works: no container_name, no host ports on the worker.
- Workers and the gateway run real `aeon` commands against the compose Redis.
- The cluster file: six persistent cluster nodes that announce names workers can resolve and
  keep fixed addresses; a one-shot init that makes them one cluster (and leaves an existing one
  alone), run here against a stand-in redis-cli; workers that wait for it, with AEON_SHARDS
  equal to the number of masters and AEON_WAIT_REPLICAS=1.
- The image installs the project from files that exist and are not dockerignored.
"""

from __future__ import annotations

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
    from bus.settings import BusSettings

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
    from bus.settings import BusSettings

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
