"""Static checks of the deployment files: docker-compose.yml, Dockerfile, Procfile, .dockerignore.

No Docker engine is needed. The compose file is interpolated the way Compose does it, validated
against the Compose Specification JSON schema vendored in tests/data/compose-spec/ (see its
PROVENANCE.md), and then checked for the fleet's rules (one writer, scalable embed workers,
authenticated loopback-only Flower, no secret literals, graceful shutdown, health checks).
Every command a service or Procfile line runs is checked against the `memq` CLI contract by
`assert_valid_memq_command`.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
PROCFILE = ROOT / "Procfile"
DOCKERIGNORE = ROOT / ".dockerignore"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
SCHEMA_DIR = Path(__file__).resolve().parent / "data" / "compose-spec"
SCHEMA_FILE = SCHEMA_DIR / "compose-spec.json"

# Celery's worker_soft_shutdown_timeout set by workers/ (seconds). Compose must wait longer.
WORKER_SOFT_SHUTDOWN_S = 30.0
# Procfile (one host, no Docker): the broker the fleet uses when MEMQ_BROKER_URL is unset.
PROCFILE_DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
JOB_PROFILE = "jobs"

# The environment used to interpolate docker-compose.yml in these tests: only what the file
# requires, never the caller's environment (tests must not depend on who runs them).
COMPOSE_TEST_ENV = {
    "FLOWER_BASIC_AUTH": "admin:test-only-not-a-secret",
    "MEMQ_HOST_WORKSPACE": "/srv/agent-memory",
}


# --------------------------------------------------------------------------------------------
# The memq CLI contract.
#
# To check against the real CLI instead of this table, make `memq_parser()` return the
# project's parser (e.g. `from memq.cli import build_parser; return build_parser()`).
# `test_real_cli_parser_accepts_deploy_commands` already does that when memq.cli exposes
# `build_parser()`.
# --------------------------------------------------------------------------------------------

EMBED_PROVIDERS = ("local",)
BATCH_PROVIDERS = ("openai", "gemini", "voyage")


class _Reject(Exception):
    pass


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def memq_parser() -> argparse.ArgumentParser:
    """An argparse mirror of the `memq` CLI contract the deployment files rely on."""
    parser = argparse.ArgumentParser(prog="memq", exit_on_error=False)
    sub = parser.add_subparsers(dest="command", required=True)

    worker = sub.add_parser("worker", exit_on_error=False)
    worker.add_argument("--role", required=True, choices=("writer", "reader", "embed", "batch"))
    worker.add_argument("--provider", choices=sorted({*EMBED_PROVIDERS, *BATCH_PROVIDERS}))
    worker.add_argument("--concurrency", type=_positive_int)
    worker.add_argument("--shard", type=int, action="append")
    worker.add_argument("--name")

    index = sub.add_parser("index", exit_on_error=False)
    index.add_argument("--no-wait", action="store_true")

    search = sub.add_parser("search", exit_on_error=False)
    search.add_argument("query")
    search.add_argument("--json", action="store_true")

    status = sub.add_parser("status", exit_on_error=False)
    status.add_argument("--json", action="store_true")

    watch = sub.add_parser("watch", exit_on_error=False)
    watch.add_argument("--polling", action=argparse.BooleanOptionalAction, default=None)
    watch.add_argument("--heartbeat", type=Path)
    watch.add_argument("--debounce-ms", type=_positive_int)
    watch.add_argument("--interval-minutes", type=float)

    flower = sub.add_parser("flower", exit_on_error=False)
    flower.add_argument("--address", default="127.0.0.1")
    flower.add_argument("--port", type=int, default=5555)
    flower.add_argument("--unauthenticated", action="store_true")
    return parser


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return parser.parse_args(list(argv))
    except (SystemExit, argparse.ArgumentError) as exc:
        raise _Reject(f"{exc} {err.getvalue().strip()}".strip()) from exc


def _check_contract_rules(ns: argparse.Namespace) -> None:
    """Rules argparse alone does not express."""
    if ns.command != "worker":
        return
    if ns.role in ("embed", "batch") and ns.provider is None:
        raise _Reject(f"`worker --role {ns.role}` needs --provider")
    if ns.role == "batch" and ns.provider not in BATCH_PROVIDERS:
        raise _Reject(f"`worker --role batch`: {ns.provider} has no batch API")
    if ns.role == "writer" and (ns.provider is not None or ns.concurrency is not None):
        raise _Reject("the writer takes no --provider/--concurrency (single consumer, -c 1)")
    if ns.role == "reader" and ns.provider is not None:
        raise _Reject("a reader takes no --provider (it embeds queries with the index's own)")
    if ns.role not in ("writer", "reader") and ns.shard:
        raise _Reject("only a writer or a reader takes --shard")


def assert_valid_memq_command(argv: Sequence[str]) -> argparse.Namespace:
    """Assert that `memq *argv` is a valid invocation (argv without the program name)."""
    assert all(isinstance(a, str) for a in argv), f"non-string argument in {argv!r}"
    try:
        ns = _parse(memq_parser(), argv)
        _check_contract_rules(ns)
    except _Reject as exc:
        pytest.fail(f"not a valid memq command: memq {shlex.join(argv)}: {exc}")
    return ns


def role_of(ns: argparse.Namespace) -> tuple[str, ...]:
    """What a long-running process is, independent of what a file calls it."""
    if ns.command == "worker":
        return ("worker", ns.role, ns.provider or "")
    return (ns.command,)


def node_prefix(ns: argparse.Namespace) -> str:
    """The part before the host of the Celery node name ``memq worker`` gives this worker
    (`writer@`, `embed-local@` when named so, `embed-local-<pid>@` by default)."""
    from memq.cli import worker_command

    assert ns.command == "worker"
    argv = worker_command(ns.role, ns.provider, ns.concurrency, "INFO", ns.name)
    node = argv[argv.index("-n") + 1]
    assert node.endswith("@%h"), node
    return node.removesuffix("%h")


def test_contract_parser_accepts_and_rejects() -> None:
    for argv in (
        ["worker", "--role", "writer"],
        ["worker", "--role", "embed", "--provider", "local"],
        ["worker", "--role", "embed", "--provider", "local", "--concurrency", "3"],
        ["worker", "--role", "batch", "--provider", "openai"],
        ["worker", "--role", "reader", "--shard", "1", "--concurrency", "8"],
        ["index"],
        ["index", "--no-wait"],
        ["search", "what did we decide", "--json"],
        ["status", "--json"],
        ["flower"],
        ["flower", "--address", "0.0.0.0", "--port", "5555"],
        ["watch"],
        ["watch", "--polling", "--heartbeat", "/tmp/alive"],
    ):
        assert_valid_memq_command(argv)
    for argv in (
        [],
        ["serve"],
        ["worker"],
        ["worker", "--role", "reader", "--provider", "local"],
        ["worker", "--role", "embed"],
        ["worker", "--role", "batch"],
        ["worker", "--role", "batch", "--provider", "local"],
        ["worker", "--role", "embed", "--provider", "local", "--concurrency", "0"],
        ["worker", "--role", "writer", "--concurrency", "2"],
        ["index", "--watch"],
        ["search"],
        ["flower", "--port", "http"],
        ["watch", "--polling=yes"],
    ):
        with pytest.raises(pytest.fail.Exception):
            assert_valid_memq_command(argv)


# --------------------------------------------------------------------------------------------
# Compose interpolation (the subset of the Compose Specification's rules that files use:
# $$, $VAR, ${VAR}, ${VAR:-d}, ${VAR-d}, ${VAR:?e}, ${VAR?e}, ${VAR:+a}, ${VAR+a}).
# --------------------------------------------------------------------------------------------

_INTERP = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
    r"|(?P<named>[A-Za-z_][A-Za-z0-9_]*))"
)


class InterpolationError(ValueError):
    pass


def interpolate(text: str, env: Mapping[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group("escaped"):
            return "$"
        name = m.group("braced") or m.group("named")
        op, arg = m.group("op"), m.group("arg") or ""
        value = env.get(name)
        present = value is not None
        nonempty = bool(value)
        if op in (":-", "-"):
            use_default = not nonempty if op == ":-" else not present
            return arg if use_default else value  # type: ignore[return-value]
        if op in (":?", "?"):
            missing = not nonempty if op == ":?" else not present
            if missing:
                raise InterpolationError(f"required variable {name} is missing: {arg}")
            return value  # type: ignore[return-value]
        if op in (":+", "+"):
            use_alt = nonempty if op == ":+" else present
            return arg if use_alt else ""
        return value or ""

    if "${" in text and _INTERP.sub("", text).count("${"):
        raise InterpolationError(f"unsupported interpolation in {text!r}")
    return _INTERP.sub(sub, text)


def interpolate_tree(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [interpolate_tree(item, env) for item in node]
    if isinstance(node, dict):
        return {key: interpolate_tree(value, env) for key, value in node.items()}
    return node


def test_interpolation_rules() -> None:
    env = {"SET": "v", "EMPTY": ""}
    assert interpolate("$$HOSTNAME ${SET} $SET", env) == "$HOSTNAME v v"
    assert interpolate("${UNSET:-d} ${EMPTY:-d} ${EMPTY-d} ${SET:-d}", env) == "d d  v"
    assert interpolate("${SET:+a}|${EMPTY:+a}|${EMPTY+a}", env) == "a||a"
    assert interpolate("${SET:?boom}", env) == "v"
    for text in ("${UNSET:?boom}", "${EMPTY:?boom}", "${UNSET?boom}"):
        with pytest.raises(InterpolationError, match="boom"):
            interpolate(text, env)


# --------------------------------------------------------------------------------------------
# Loading the files
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose_text() -> str:
    return COMPOSE_FILE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def raw_compose(compose_text: str) -> dict[str, Any]:
    data = yaml.safe_load(compose_text)  # resolves the x-memq anchors and `<<` merges
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def compose(raw_compose: dict[str, Any]) -> dict[str, Any]:
    return interpolate_tree(raw_compose, COMPOSE_TEST_ENV)


def service_argv(service: Mapping[str, Any]) -> list[str]:
    command = service.get("command")
    assert command is not None, "a memq service must set `command` (the image's CMD is --help)"
    argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
    if service.get("entrypoint") is not None:
        pytest.fail("memq services must keep the image's `memq` entrypoint")
    return argv


def is_memq_service(service: Mapping[str, Any]) -> bool:
    image = str(service.get("image", ""))
    return "build" in service or image.startswith("memq") or "MEMQ_IMAGE" in image


def is_job(service: Mapping[str, Any]) -> bool:
    return JOB_PROFILE in (service.get("profiles") or [])


def memq_services(compose: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in compose["services"].items() if is_memq_service(s)}


def long_running(compose: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in memq_services(compose).items() if not is_job(s)}


def env_dict(service: Mapping[str, Any]) -> dict[str, Any]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        out: dict[str, Any] = {}
        for item in env:
            key, sep, value = item.partition("=")
            out[key] = value if sep else None
        return out
    return dict(env)


def parse_duration(text: str | int | float) -> float:
    """Compose duration ("45s", "1m30s", "500ms") in seconds."""
    if isinstance(text, int | float):
        return float(text)
    units = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)(us|ms|s|m|h)", text)
    assert parts and "".join(n + u for n, u in parts) == text, f"bad duration {text!r}"
    return sum(float(n) * units[u] for n, u in parts)


def test_parse_duration() -> None:
    assert parse_duration("45s") == 45
    assert parse_duration("1m30s") == 90
    assert parse_duration("500ms") == 0.5


# --------------------------------------------------------------------------------------------
# Compose: schema
# --------------------------------------------------------------------------------------------


def test_vendored_schema_matches_provenance() -> None:
    provenance = (SCHEMA_DIR / "PROVENANCE.md").read_text(encoding="utf-8")
    for name in ("compose-spec.json", "LICENSE"):
        digest = hashlib.sha256((SCHEMA_DIR / name).read_bytes()).hexdigest()
        assert digest in provenance, f"{name} changed: update PROVENANCE.md ({digest})"


def test_compose_has_no_version_key(raw_compose: dict[str, Any]) -> None:
    assert "version" not in raw_compose, "the Compose Specification has no top-level version"


def test_compose_validates_against_compose_spec_schema(compose: dict[str, Any]) -> None:
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - a missing test dependency must be loud
        pytest.fail("jsonschema is a test dependency: add `jsonschema>=4.18` to the test extra")
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    validator_cls = jsonschema.validators.validator_for(schema)
    validator_cls.check_schema(schema)
    errors = sorted(validator_cls(schema).iter_errors(compose), key=lambda e: list(e.path))
    assert not errors, "\n".join(
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors
    )


def test_schema_check_is_not_vacuous(compose: dict[str, Any]) -> None:
    import jsonschema

    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    validator = jsonschema.validators.validator_for(schema)(schema)
    broken = json.loads(json.dumps(compose))
    broken["services"]["writer"]["stop_grace_period_typo"] = "45s"
    broken["services"]["redis"]["healthcheck"]["interval"] = 10
    assert len(list(validator.iter_errors(broken))) >= 2


# --------------------------------------------------------------------------------------------
# Compose: the fleet's rules
# --------------------------------------------------------------------------------------------


def test_expected_services(compose: dict[str, Any]) -> None:
    assert {"redis", "writer", "watch", "embed-local", "flower", "index"} <= set(
        compose["services"])


def test_shared_anchor_avoids_repeating_env(raw_compose: dict[str, Any], compose_text: str):
    assert any(key.startswith("x-memq") for key in raw_compose)
    settings = re.findall(r"^\s*-?\s*MEMQ_BROKER_URL\s*[:=]", compose_text, re.M)
    assert len(settings) == 1, "set the broker once, in the x- anchor"
    brokers = {env_dict(s).get("MEMQ_BROKER_URL") for s in memq_services(raw_compose).values()}
    assert brokers == {"${MEMQ_BROKER_URL:-redis://redis:6379/0}"}


def test_required_interpolation_guards(raw_compose: dict[str, Any]) -> None:
    flower_env = env_dict(raw_compose["services"]["flower"])
    assert flower_env["FLOWER_BASIC_AUTH"] == "${FLOWER_BASIC_AUTH:?set FLOWER_BASIC_AUTH}"
    for missing in COMPOSE_TEST_ENV:
        env = {k: v for k, v in COMPOSE_TEST_ENV.items() if k != missing}
        with pytest.raises(InterpolationError, match=missing):
            interpolate_tree(raw_compose, env)
    with pytest.raises(InterpolationError, match="FLOWER_BASIC_AUTH"):
        interpolate_tree(raw_compose, {**COMPOSE_TEST_ENV, "FLOWER_BASIC_AUTH": ""})


@pytest.mark.parametrize("name", ["redis", "writer", "watch", "embed-local", "flower", "index"])
def test_memq_service_commands_are_valid(compose: dict[str, Any], name: str) -> None:
    service = compose["services"][name]
    if not is_memq_service(service):
        assert name == "redis"
        return
    assert_valid_memq_command(service_argv(service))


def test_all_memq_service_commands_are_valid(compose: dict[str, Any]) -> None:
    services = memq_services(compose)
    assert services
    for service in services.values():
        assert_valid_memq_command(service_argv(service))


def test_service_roles(compose: dict[str, Any]) -> None:
    svc = compose["services"]
    ns = assert_valid_memq_command(service_argv(svc["writer"]))
    assert role_of(ns) == ("worker", "writer", "")
    ns = assert_valid_memq_command(service_argv(svc["embed-local"]))
    assert role_of(ns) == ("worker", "embed", "local")
    ns = assert_valid_memq_command(service_argv(svc["flower"]))
    assert role_of(ns) == ("flower",)
    assert not ns.unauthenticated
    ns = assert_valid_memq_command(service_argv(svc["index"]))
    assert ns.command == "index"
    assert is_job(svc["index"])


def writers_by_shard(commands: Mapping[str, Sequence[str]]) -> dict[int, list[str]]:
    """The writer processes of each shard (``--shard``; all shards when none is given)."""
    out: dict[int, list[str]] = {}
    for name, argv in commands.items():
        ns = assert_valid_memq_command(argv)
        if role_of(ns) == ("worker", "writer", ""):
            for shard in ns.shard or [0]:
                out.setdefault(shard, []).append(name)
    return out


def test_exactly_one_writer_per_shard(compose: dict[str, Any]) -> None:
    services = memq_services(compose)
    shards = int(env_dict(services["writer"])["MEMQ_FLEET_SHARDS"])
    assert shards == 2
    assert all(env_dict(s).get("MEMQ_FLEET_SHARDS") == str(shards) for s in services.values()), \
        "every service must agree on the number of shards"
    by_shard = writers_by_shard({n: service_argv(s) for n, s in services.items()})
    assert by_shard == {0: ["writer"], 1: ["writer-1"]}, by_shard
    for name in ("writer", "writer-1"):
        writer = compose["services"][name]
        assert not is_job(writer) and not writer.get("profiles")
        assert (writer.get("deploy") or {}).get("replicas", 1) == 1
        assert int(writer.get("scale", 1)) == 1


def test_writer_runs_the_index_jobs(compose: dict[str, Any]) -> None:
    """The writer consumes `store` and `control` (index jobs), and has what an index job
    needs on its host: the store, the workspace and the model cache."""
    from memq.cli import worker_command

    writer = compose["services"]["writer"]
    ns = assert_valid_memq_command(service_argv(writer))
    argv = worker_command(ns.role, ns.provider, ns.concurrency, "INFO", shards=ns.shard)
    assert argv[argv.index("-Q") + 1].split(",") == ["store.0", "control.0"]
    env = env_dict(writer)
    targets = {str(v).split(":")[1] for v in writer["volumes"]}
    assert {str(Path(env["MEMQ_STORE_PATH"]).parent), env["MEMQ_WORKSPACE"],
            env["MEMQ_CACHE_DIR"]} <= targets


def test_watcher_runs_beside_the_writer(compose: dict[str, Any]) -> None:
    """One watcher, on the writer's host: the same store volume and workspace, and the same
    settings, so its producer passes write the store the writer owns."""
    watchers = [n for n, s in long_running(compose).items()
                if role_of(assert_valid_memq_command(service_argv(s))) == ("watch",)]
    assert watchers == ["watch"]
    watch, writer = compose["services"]["watch"], compose["services"]["writer"]
    assert env_dict(watch) == env_dict(writer)
    assert set(watch["volumes"]) == set(writer["volumes"])
    assert (watch.get("deploy") or {}).get("replicas", 1) == 1
    assert watch["depends_on"]["writer"]["condition"] == "service_healthy"


def _host_ports(service: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(host_ip, published) for every port published on the host."""
    out = []
    for port in service.get("ports") or []:
        if isinstance(port, dict):
            if port.get("published") not in (None, ""):
                out.append((str(port.get("host_ip", "")), str(port["published"])))
            continue
        parts = str(port).split("/")[0].split(":")
        if len(parts) == 3:
            out.append((parts[0], parts[1]))
        elif len(parts) == 2:
            out.append(("", parts[0]))
    return out


def _container_ports(service: Mapping[str, Any]) -> list[str]:
    out = []
    for port in service.get("ports") or []:
        if isinstance(port, dict):
            out.append(str(port.get("target")))
        else:
            out.append(str(port).split("/")[0].split(":")[-1])
    return out


def test_batch_worker_never_opens_the_store(compose: dict[str, Any]) -> None:
    """The batch worker role is there (opt-in profile), on its own queue, HTTP only."""
    from memq.cli import worker_command

    batch = {name: s for name, s in memq_services(compose).items()
             if role_of(assert_valid_memq_command(service_argv(s)))[:2] == ("worker", "batch")}
    assert list(batch) == ["batch-openai"]
    service = batch["batch-openai"]
    assert service.get("profiles") == ["batch"]
    assert "MEMQ_STORE_PATH" not in env_dict(service) and not service.get("volumes")
    assert "OPENAI_API_KEY" in env_dict(service)
    ns = assert_valid_memq_command(service_argv(service))
    argv = worker_command(ns.role, ns.provider, ns.concurrency, "INFO")
    assert argv[argv.index("-Q") + 1] == "batch.openai"


def test_embed_workers_are_scalable(compose: dict[str, Any]) -> None:
    embed = [
        s
        for s in memq_services(compose).values()
        if role_of(assert_valid_memq_command(service_argv(s)))[:2] == ("worker", "embed")
    ]
    assert embed
    for service in embed:
        assert "container_name" not in service, "container_name forbids --scale"
        assert not _host_ports(service), "fixed host ports forbid --scale"
        assert (service.get("deploy") or {}).get("replicas", 1) >= 1


def test_only_the_owning_host_mounts_the_store(compose: dict[str, Any]) -> None:
    svc = compose["services"]
    store_path = env_dict(svc["writer"])["MEMQ_STORE_PATH"]
    store_dir = str(Path(store_path).parent)

    def volume_at(service: Mapping[str, Any], target: str) -> str | None:
        for volume in service.get("volumes") or []:
            if isinstance(volume, dict):
                if volume.get("target") == target:
                    return str(volume.get("source"))
                continue
            source, _, rest = str(volume).partition(":")
            if rest.split(":")[0] == target:
                return source
        return None

    data_volume = volume_at(svc["writer"], store_dir)
    assert data_volume and data_volume in compose.get("volumes", {}), "store on a named volume"
    # The producer writes chunk rows into the same file: same volume, same path.
    assert env_dict(svc["index"])["MEMQ_STORE_PATH"] == store_path
    assert volume_at(svc["index"], store_dir) == data_volume
    # Embedding workers and Flower never open the SQLite file.
    for name in ("embed-local", "flower"):
        assert "MEMQ_STORE_PATH" not in env_dict(svc[name]), name
        mounts = svc[name].get("volumes") or []
        assert not any(str(v).startswith(f"{data_volume}:") for v in mounts), name
    # The job log is shared by the store's host and Flower (each job's outcome), apart from
    # the store.
    jobs = env_dict(svc["flower"])["MEMQ_RESULT_BACKEND"].removeprefix("db+sqlite:///")
    for name in ("writer", "writer-1", "reader", "reader-1", "watch", "index", "flower"):
        assert volume_at(svc[name], str(Path(jobs).parent)) == "jobs", name
    # Embedding workers share the model cache volume.
    cache_dir = env_dict(svc["embed-local"])["MEMQ_CACHE_DIR"]
    assert volume_at(svc["embed-local"], cache_dir) in compose["volumes"]


def test_flower_requires_auth_and_binds_loopback(compose: dict[str, Any]) -> None:
    flower = compose["services"]["flower"]
    env = env_dict(flower)
    assert env.get("FLOWER_BASIC_AUTH") == COMPOSE_TEST_ENV["FLOWER_BASIC_AUTH"]
    assert str(env.get("FLOWER_UNAUTHENTICATED_API", "")).lower() not in ("1", "true", "yes")
    assert "--unauthenticated" not in service_argv(flower)
    published = _host_ports(flower)
    assert published, "flower publishes its UI (and /metrics) on the host"
    for host_ip, port in published:
        assert host_ip == "127.0.0.1", f"flower port {port} must bind 127.0.0.1, not {host_ip!r}"
    # Docker forwards a published port to the container's own interface: a Flower listening on
    # the container's loopback (memq flower's default) would be unreachable.
    ns = assert_valid_memq_command(service_argv(flower))
    assert ns.address in ("0.0.0.0", "::"), f"flower listens on {ns.address} in its container"
    assert str(ns.port) in _container_ports(flower), "published port is the one flower serves"
    for name, service in compose["services"].items():
        if name != "flower":
            assert not _host_ports(service), f"{name} publishes a host port"


def test_stop_grace_period_exceeds_worker_soft_shutdown(compose: dict[str, Any]) -> None:
    for name, service in long_running(compose).items():
        grace = parse_duration(service.get("stop_grace_period", "10s"))
        assert grace > WORKER_SOFT_SHUTDOWN_S, f"{name}: stop_grace_period {grace}s"
        assert service.get("stop_signal", "SIGTERM") == "SIGTERM", f"{name}: warm shutdown"


def test_long_running_services_have_healthchecks(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        if is_job(service):
            continue
        check = service.get("healthcheck") or {}
        assert check.get("test") and not check.get("disable"), f"{name} needs a healthcheck"
        assert check.get("test") != ["NONE"], name


def test_worker_healthchecks_ping_their_own_node(compose: dict[str, Any]) -> None:
    for name, service in long_running(compose).items():
        ns = assert_valid_memq_command(service_argv(service))
        if ns.command != "worker":
            continue
        test = service["healthcheck"]["test"]
        text = test if isinstance(test, str) else " ".join(test)
        assert "inspect ping" in text, name
        assert f"-d {node_prefix(ns)}$HOSTNAME" in text, f"{name}: ping its own node name"


def test_redis_is_persistent_and_healthy(compose: dict[str, Any]) -> None:
    redis = compose["services"]["redis"]
    assert str(redis["image"]).startswith("redis:7")
    command = redis["command"]
    argv = shlex.split(command) if isinstance(command, str) else command
    assert "--appendonly" in argv and argv[argv.index("--appendonly") + 1] == "yes"
    assert any(str(v).split(":")[1:2] == ["/data"] for v in redis["volumes"])
    assert str(redis["volumes"][0]).split(":")[0] in compose["volumes"]
    test = redis["healthcheck"]["test"]
    assert "redis-cli" in test and "ping" in test


def test_restart_policies_and_dependencies(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        if is_job(service):
            assert service.get("restart", "no") == "no", f"{name}: one-shot job"
        else:
            assert service.get("restart") == "unless-stopped", name
    for name, service in memq_services(compose).items():
        depends = service.get("depends_on") or {}
        assert isinstance(depends, dict), f"{name}: depends_on needs conditions"
        assert depends.get("redis", {}).get("condition") == "service_healthy", name


def test_index_job_runs_with_the_writer(compose: dict[str, Any]) -> None:
    index = compose["services"]["index"]
    assert index["profiles"] == [JOB_PROFILE]
    assert "writer" in index["depends_on"]


# --------------------------------------------------------------------------------------------
# Secrets
# --------------------------------------------------------------------------------------------

# Built from pieces so that this file itself never looks like it holds a key.
SECRET_PATTERNS = {
    "OpenAI key": r"\bs" r"k-(?:proj-)?[A-Za-z0-9_-]{20,}",
    "Google API key": r"\bAI" r"za[0-9A-Za-z_-]{35}",
    "Voyage key": r"\bp" r"a-[A-Za-z0-9_-]{30,}",
    "AWS access key": r"\bAK" r"IA[0-9A-Z]{16}\b",
    "GitHub token": r"\bgh" r"[pousr]_[A-Za-z0-9]{36,}",
    "Slack token": r"\bxo" r"x[abprs]-[A-Za-z0-9-]{10,}",
    "Hugging Face token": r"\bh" r"f_[A-Za-z0-9]{30,}",
    "private key": r"-----BEGIN [A-Z ]*PRIVATE" r" KEY-----",
    "password in URL": r"\b(?:redis|rediss|amqp|amqps)://[^\s/:@$]*:(?!\$\{)[^\s@]+@",
}
SECRET_KEY_NAME = re.compile(r"(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|AUTH|CREDENTIAL)", re.I)


def find_secrets(text: str) -> list[str]:
    return [
        f"{label}: {m.group(0)[:12]}..."
        for label, pattern in SECRET_PATTERNS.items()
        for m in re.finditer(pattern, text)
    ]


def test_secret_patterns_catch_samples() -> None:
    samples = [
        "OPENAI_API_KEY=s" + "k-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2",
        "GEMINI=AI" + "za" + "SyA1234567890abcdefghijklmnopqrstuv",
        "VOYAGE=p" + "a-" + "abcdefghijklmnopqrstuvwxyz0123456789",
        "redis://:hunter2" + "@redis:6379/0",
        "-----BEGIN RSA PRIVATE" + " KEY-----",
    ]
    for sample in samples:
        assert find_secrets(sample), sample
    assert not find_secrets("redis://:${REDIS_PASSWORD}@redis:6379/0")
    assert not find_secrets("redis://redis:6379/0 FLOWER_BASIC_AUTH=${FLOWER_BASIC_AUTH:?x}")


@pytest.mark.parametrize(
    "path", [COMPOSE_FILE, DOCKERFILE, PROCFILE, DOCKERIGNORE, DEPLOY_DOC], ids=lambda p: p.name
)
def test_no_secret_literals(path: Path) -> None:
    assert path.exists(), path
    assert not find_secrets(path.read_text(encoding="utf-8")), path


_ENV_REFERENCE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-?+])?(?P<arg>[^}]*)\}")


def test_secret_env_values_come_from_the_environment(raw_compose: dict[str, Any]) -> None:
    for name, service in raw_compose["services"].items():
        for key, value in env_dict(service).items():
            if not SECRET_KEY_NAME.search(key) or value is None:  # None: passed through
                continue
            m = _ENV_REFERENCE.fullmatch(str(value))
            assert m, f"{name}: {key} must come from the environment, not a literal"
            assert m.group("op") in (None, ":?", "?"), f"{name}: {key} must not have a default"


# --------------------------------------------------------------------------------------------
# Procfile
# --------------------------------------------------------------------------------------------

PROCFILE_LINE = re.compile(r"^([A-Za-z0-9_]+):\s*(.+)$")  # portable: honcho, foreman, Heroku
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def procfile_entries() -> dict[str, str]:
    entries: dict[str, str] = {}
    for line in PROCFILE.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = PROCFILE_LINE.match(line)
        assert m, f"not a Procfile line: {line!r}"
        assert m.group(1) not in entries, f"duplicate process {m.group(1)}"
        entries[m.group(1)] = m.group(2)
    return entries


def procfile_argv(command: str, env: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """Split `A=.. B=.. exec memq ...` the way sh would, with `env` as the environment."""
    words = [interpolate(w, env) for w in shlex.split(command)]
    assignments: dict[str, str] = {}
    while words and _ASSIGNMENT.match(words[0]):
        key, _, value = words.pop(0).partition("=")
        assignments[key] = value
    if words and words[0] == "exec":
        words.pop(0)
    return assignments, words


def test_procfile_commands_are_valid_memq_commands() -> None:
    entries = procfile_entries()
    assert entries
    for name, command in entries.items():
        assignments, argv = procfile_argv(command, {})
        assert argv and argv[0] == "memq", f"{name}: runs {argv[:1]}"
        assert_valid_memq_command(argv[1:])
        assert assignments.get("MEMQ_BROKER_URL") == PROCFILE_DEFAULT_BROKER, name
        # An operator's MEMQ_BROKER_URL wins over the default.
        override = "redis://10.0.0.5:6379/1"
        got, _ = procfile_argv(command, {"MEMQ_BROKER_URL": override})
        assert got["MEMQ_BROKER_URL"] == override, name


def test_procfile_roles_match_compose_roles(compose: dict[str, Any]) -> None:
    procfile_roles = sorted(
        role_of(assert_valid_memq_command(procfile_argv(cmd, {})[1][1:]))
        for cmd in procfile_entries().values()
    )
    compose_roles = sorted(
        role_of(assert_valid_memq_command(service_argv(s))) for s in long_running(compose).values()
    )
    assert procfile_roles == compose_roles
    procfile = {name: procfile_argv(cmd, {})[1][1:] for name, cmd in procfile_entries().items()}
    assert writers_by_shard(procfile) == {0: ["writer_0"], 1: ["writer_1"]}
    for name, command in procfile_entries().items():
        if name != "flower":
            assert procfile_argv(command, {})[0]["MEMQ_FLEET_SHARDS"] == "2", name


def test_procfile_flower_binds_loopback_and_keeps_auth() -> None:
    for command in procfile_entries().values():
        assignments, argv = procfile_argv(command, {})
        if argv[1] != "flower":
            continue
        ns = assert_valid_memq_command(argv[1:])
        assert ns.address == "127.0.0.1" and not ns.unauthenticated
        _, argv = procfile_argv(command, {"FLOWER_ADDRESS": "10.0.0.5"})
        assert assert_valid_memq_command(argv[1:]).address == "10.0.0.5"
        assert "FLOWER_BASIC_AUTH" not in assignments, "auth comes from the environment"
        break
    else:
        pytest.fail("Procfile has no flower process")


# The watcher's command is started for real (keyword-only, so no broker or model is needed):
# it must come up, index what is there, and follow a file written after it started.

WATCH_STARTUP_S = 60.0


def _watch_env(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    workspace, store = tmp_path / "ws", tmp_path / "data" / "memq.sqlite"
    (workspace / "memory").mkdir(parents=True)
    (workspace / "MEMORY.md").write_text("# Memory\nwritten before the watcher started\n")
    env = {**os.environ, "MEMQ_WORKSPACE": str(workspace), "MEMQ_STORE_PATH": str(store),
           "MEMQ_PROVIDER": "none", "MEMQ_CONFIG": "none", "MEMQ_HOME": str(tmp_path / "home"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("MEMQ_BROKER_URL", None)
    return workspace, store, env


def _indexed(store: Path) -> set[str]:
    import sqlite3

    if not store.exists():
        return set()
    conn = sqlite3.connect(store, timeout=5)
    try:
        return {row[0] for row in conn.execute("SELECT path FROM files")}
    except sqlite3.OperationalError:  # the schema is not there yet
        return set()
    finally:
        conn.close()


def _wait_until(check: Any, proc: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + WATCH_STARTUP_S
    while time.monotonic() < deadline:
        if check():
            return
        if proc.poll() is not None:
            pytest.fail(f"the watcher exited ({proc.returncode}) before {what}: "
                        f"{proc.communicate()[0][-2000:]}")
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def _run_watch(argv: list[str], env: dict[str, str], workspace: Path, store: Path,
               heartbeat: Path | None = None) -> None:
    """Start ``argv``, see it follow the workspace, then interrupt it (its whole group)."""
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        _wait_until(lambda: "MEMORY.md" in _indexed(store), proc, "the first reconcile")
        (workspace / "memory" / "later.md").write_text("# Later\nwritten while watched\n")
        _wait_until(lambda: "memory/later.md" in _indexed(store), proc, "the new file")
        if heartbeat is not None:
            _wait_until(heartbeat.exists, proc, "the heartbeat")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def test_procfile_watch_command_starts_and_follows_the_files(tmp_path: Path) -> None:
    command = procfile_entries().get("watch")
    assert command is not None, "Procfile has no watch process"
    workspace, store, env = _watch_env(tmp_path)
    _run_watch(["sh", "-c", command], env, workspace, store)


def test_compose_watch_command_starts_and_passes_its_healthcheck(
        compose: dict[str, Any], tmp_path: Path) -> None:
    service = compose["services"]["watch"]
    argv = service_argv(service)
    heartbeat = argv[argv.index("--heartbeat") + 1]
    check = service["healthcheck"]["test"]
    assert check[:3] == ["CMD", "python", "-c"] and heartbeat in check[3]
    local = tmp_path / "memq-watch.alive"
    health = [sys.executable, "-c", check[3].replace(heartbeat, str(local))]
    assert subprocess.run(health, capture_output=True, timeout=30).returncode != 0  # no beat
    workspace, store, env = _watch_env(tmp_path)
    argv[argv.index("--heartbeat") + 1] = str(local)
    _run_watch([sys.executable, "-m", "memq.cli", *argv], env, workspace, store, local)
    assert subprocess.run(health, capture_output=True, timeout=30).returncode == 0
    os.utime(local, (time.time() - 120, time.time() - 120))  # a loop stuck for two minutes
    assert subprocess.run(health, capture_output=True, timeout=30).returncode != 0


def deploy_commands(compose: Mapping[str, Any]) -> list[list[str]]:
    """Every memq argv (without the program name) the deployment files run."""
    argvs = [service_argv(s) for s in memq_services(compose).values()]
    argvs += [procfile_argv(cmd, {})[1][1:] for cmd in procfile_entries().values()]
    return argvs


def test_real_cli_parser_accepts_deploy_commands(compose: dict[str, Any]) -> None:
    """The project's own parser (memq.cli.build_parser) agrees with the contract table."""
    try:
        from memq.cli import build_parser
    except ImportError as exc:
        pytest.skip(f"memq.cli.build_parser not importable yet: {exc}")
    for argv in deploy_commands(compose):
        contract = assert_valid_memq_command(argv)
        try:
            real = _parse(build_parser(), argv)
        except _Reject as exc:
            pytest.fail(f"memq's own parser rejects `memq {shlex.join(argv)}`: {exc}")
        assert real.command == contract.command, argv
        for field in ("role", "provider", "concurrency", "address", "port", "unauthenticated",
                      "polling", "heartbeat"):
            if hasattr(contract, field):
                assert getattr(real, field, None) == getattr(contract, field), (argv, field)


def test_procfile_passes_honcho_check() -> None:
    if importlib.util.find_spec("honcho") is None:
        pytest.skip("honcho not installed (optional; `pip install honcho`)")
    result = subprocess.run(
        [sys.executable, "-m", "honcho", "-f", str(PROCFILE), "check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --------------------------------------------------------------------------------------------
# Dockerfile and .dockerignore
# --------------------------------------------------------------------------------------------


def dockerfile_stages() -> list[list[str]]:
    """Instructions (continuations joined, comments dropped) grouped by stage."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    stages: list[list[str]] = [[]]
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        stages[-1].append(line)
    return stages


def test_dockerfile_is_multistage_slim_python() -> None:
    preamble, *stages = dockerfile_stages()
    assert len(stages) >= 2, "builder + runtime stages"
    args = {}
    for line in preamble:
        m = re.match(r"ARG\s+(\w+)=(\S+)", line)
        if m:
            args[m.group(1)] = m.group(2).strip("\"'")
    for stage in stages:
        base = stage[0].split()[1]
        base = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), base)
        assert base == "python:3.11-slim", stage[0]


def test_dockerfile_runtime_stage() -> None:
    *builders, final = dockerfile_stages()[1:]
    text = "\n".join(final)
    assert "build-essential" not in text and "cmake" not in text, "no compiler in the image"
    assert any("build-essential" in line and "cmake" in line for s in builders for line in s)
    users = [line.split()[1] for line in final if line.upper().startswith("USER ")]
    assert users and users[-1] not in ("root", "0"), "run as a non-root user"
    entrypoints = [line for line in final if line.upper().startswith("ENTRYPOINT ")]
    assert entrypoints and json.loads(entrypoints[-1].split(None, 1)[1]) == ["memq"]
    builder_text = "\n".join(line for s in builders for line in s)
    assert re.search(r"pip install \"\.\[fleet\]\"", builder_text), 'pip install ".[fleet]"'


def test_dockerignore_keeps_state_and_secrets_out() -> None:
    patterns = {
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    for needed in (".git", ".venv", ".env", "*.sqlite", "*.sqlite-wal"):
        assert needed in patterns, needed
    for kept in ("pyproject.toml", "pipeline", "workers", "README.md"):
        assert kept not in patterns, f"{kept} is needed to build the image"


# --------------------------------------------------------------------------------------------
# The real Compose tool, where one is installed (Docker's engine is not needed for `config`)
# --------------------------------------------------------------------------------------------


def _compose_tools() -> list[Any]:
    return [
        pytest.param(["docker-compose"], id="docker-compose"),
        pytest.param(["docker", "compose"], id="docker-compose-plugin"),
    ]


def _tool_available(tool: list[str]) -> bool:
    if shutil.which(tool[0]) is None:
        return False
    if tool == ["docker", "compose"]:
        probe = subprocess.run(
            [*tool, "version"], capture_output=True, text=True, timeout=30, check=False
        )
        return probe.returncode == 0
    return True


def _run_config(tool: list[str], env_extra: Mapping[str, str]) -> subprocess.CompletedProcess:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        **env_extra,
    }
    return subprocess.run(
        [*tool, "-f", str(COMPOSE_FILE), "--profile", JOB_PROFILE, "config", "-q"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
        env=env,
    )


@pytest.mark.parametrize("tool", _compose_tools())
def test_compose_tool_accepts_file(tool: list[str]) -> None:
    if not _tool_available(tool):
        pytest.skip(f"`{' '.join(tool)}` not installed (schema + rules above still ran)")
    result = _run_config(tool, COMPOSE_TEST_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    missing = _run_config(tool, {"MEMQ_HOST_WORKSPACE": "/srv/agent-memory"})
    assert missing.returncode != 0 and "FLOWER_BASIC_AUTH" in missing.stdout + missing.stderr
