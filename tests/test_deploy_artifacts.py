"""The deployment artefacts (Dockerfile, compose.yaml, systemd units, LICENSE), checked here.

No container engine runs in CI, and the base image's registry is out of reach, so the image
is not built by the suite (docs/deployment.md, "Containers", has the build and smoke-test
commands). What can be checked is: hadolint's rules; the rules this project sets for the
image (slim Python base, the wheel installed, a non-root user, the /healthz health check —
run here against a live server); and that every command the artefacts start is one the
`aap` command line accepts.
"""

from __future__ import annotations

import configparser
import shlex
import shutil
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest
import yaml

from aap.cli.main import main
from http_helpers import LiveServer, make_settings

ROOT = Path(__file__).resolve().parent.parent


def instructions(path: Path) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of a Dockerfile, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, rest = line.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


def accepts(args: list[str]) -> click.Context:
    """Parse ``aap ARGS`` as the CLI would (subcommands, options, choices), without running it."""
    command: click.Command = main
    parent = click.Context(main, info_name="aap")
    name, rest = "aap", list(args)
    while isinstance(command, click.Group):
        name, rest = rest[0], rest[1:]
        sub = command.get_command(parent, name)
        assert sub is not None, f"aap has no command {name!r}"
        if isinstance(sub, click.Group):
            parent = click.Context(sub, info_name=name, parent=parent)
        command = sub
    return command.make_context(name, rest, parent=parent)


# -- the Dockerfile ---------------------------------------------------------------------------


def test_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    done = subprocess.run(
        [hadolint, "--failure-threshold", "info", str(ROOT / "Dockerfile")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_dockerfile_rules_of_this_project():
    steps = instructions(ROOT / "Dockerfile")
    froms = [args for keyword, args in steps if keyword == "FROM"]
    assert froms and all(f.split()[0] == "python:${PYTHON_VERSION}-slim" for f in froms)
    assert any(k == "ARG" and a.startswith("PYTHON_VERSION=3.") for k, a in steps)
    final = steps[max(i for i, (k, _) in enumerate(steps) if k == "FROM") :]
    keywords = [k for k, _ in final]
    # The package comes from the wheel built in the first stage, nothing else.
    assert any(k == "COPY" and a.startswith("--from=build /wheels") for k, a in final)
    installs = [a for k, a in final if k == "RUN" and "pip install" in a]
    assert len(installs) == 1 and "/tmp/wheels/*.whl" in installs[0]
    # An unprivileged user, numeric so the host can resolve it, before anything runs.
    user = [a for k, a in final if k == "USER"]
    assert user == ["10001:10001"]
    assert keywords.index("USER") < keywords.index("ENTRYPOINT")
    assert any(k == "RUN" and "useradd --system --uid 10001" in a for k, a in final)
    # The health check is /healthz, and the default command serves on the exposed port.
    (health,) = [a for k, a in final if k == "HEALTHCHECK"]
    assert "/healthz" in health
    assert ("EXPOSE", "8000") in final
    entry = [a for k, a in final if k == "ENTRYPOINT"]
    cmd = [a for k, a in final if k == "CMD"]
    import json

    args = json.loads(entry[0]) + json.loads(cmd[0])
    assert args[0] == "aap"
    ctx = accepts(args[1:])
    assert (ctx.params["host"], ctx.params["port"]) == ("0.0.0.0", 8000)
    ignored = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert ignored[0] == "*" and {"!pyproject.toml", "!src/", "!LICENSE", "!README.md"} <= set(ignored)


def healthcheck_argv() -> list[str]:
    """The HEALTHCHECK's exec-form command, with this interpreter for the image's ``python``."""
    import json

    (health,) = [a for k, a in instructions(ROOT / "Dockerfile") if k == "HEALTHCHECK"]
    argv = json.loads(health[health.index("CMD") + 3 :].strip())
    assert argv[0] == "python"
    return [sys.executable, *argv[1:]]


@pytest.mark.slow
def test_the_image_health_check_command_against_a_live_server(tmp_path):
    from aap.server.app import create_app
    from aap.store import open_stores

    server = LiveServer()
    stores = open_stores(f"sqlite:///{tmp_path}/h.db")
    server.start(create_app(make_settings(server.base_url, f"sqlite:///{tmp_path}/h.db"), stores))
    try:
        healthy = subprocess.run(
            healthcheck_argv(), capture_output=True, timeout=60, env={"AAP_HEALTH_URL": f"{server.base_url}/healthz"}
        )
        assert healthy.returncode == 0, healthy.stderr
    finally:
        server.stop()
        stores.close()
    with socket.socket() as closed:  # bound, not listening: refused
        closed.bind(("127.0.0.1", 0))
        down = subprocess.run(
            healthcheck_argv(),
            capture_output=True,
            timeout=60,
            env={"AAP_HEALTH_URL": f"http://127.0.0.1:{closed.getsockname()[1]}/healthz"},
        )
    assert down.returncode != 0


# -- compose.yaml -----------------------------------------------------------------------------


def test_compose_runs_postgres_the_workers_delivery_and_the_feed_scheduler():
    doc = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = doc["services"]
    assert services["db"]["image"].startswith("postgres:")
    assert "pg_isready" in " ".join(services["db"]["healthcheck"]["test"])
    assert "pgdata:/var/lib/postgresql/data" in services["db"]["volumes"]
    assert set(doc["volumes"]) >= {"pgdata", "feeds"}
    commands = {name: service["command"] for name, service in services.items() if "command" in service}
    assert commands["migrate"] == ["db", "upgrade"]
    assert commands["web"][:1] == ["serve"] and "--workers" in commands["web"]
    assert commands["deliver"] == ["deliver"]
    assert commands["feeds"] == ["feeds", "run"]
    for args in commands.values():
        if args[0] == "feeds" and "feeds" not in main.commands:
            continue  # a build without the feed scheduler has no `aap feeds run`
        accepts(args)
    for name in ("migrate", "web", "deliver", "feeds"):
        service = services[name]
        assert service["image"] == "aap:latest" and service["build"] == "."
        env = service["environment"]
        assert env["AAP_CONFIG"] == "/etc/aap/aap.toml"
        assert env["AAP_DATABASE_URL"].startswith("postgresql://aap:${POSTGRES_PASSWORD")
        assert "./aap.toml:/etc/aap/aap.toml:ro" in service["volumes"]
    assert services["web"]["ports"] == ["8000:8000"]
    assert services["web"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def _runs_schedules(command: list[str]) -> bool:
    """``aap serve`` runs the [[feeds]] schedules in its workers; ``aap feeds run`` is the scheduler."""
    return command[:1] == ["serve"] or command[:2] == ["feeds", "run"]


def test_every_compose_service_that_runs_schedules_has_the_feed_files():
    """A scheduled feed runs wherever its lease is taken: each such service mounts the same files."""
    doc = yaml.safe_load((ROOT / "compose.yaml").read_text())
    scheduling = {name: s for name, s in doc["services"].items() if _runs_schedules(s.get("command", []))}
    assert {"web", "feeds"} <= set(scheduling)
    mounts = {name: {v.split(":")[1]: v for v in s["volumes"]} for name, s in scheduling.items()}
    for name, mounted in mounts.items():
        assert mounted.get("/var/lib/aap/feeds", "").startswith("feeds:"), name
        assert "/etc/aap/aap.toml" in mounted, name
    assert len({mounted["/var/lib/aap/feeds"] for mounted in mounts.values()}) == 1  # the same volume
    assert "feeds" in doc["volumes"]


# -- systemd units ----------------------------------------------------------------------------


@pytest.mark.parametrize("unit", ["aap.service", "aap-deliver.service"])
def test_systemd_units_start_commands_the_cli_accepts(unit):
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # keys are case-sensitive
    parser.read_string((ROOT / "deploy" / "systemd" / unit).read_text())
    service = parser["Service"]
    argv = shlex.split(service["ExecStart"])
    assert argv[0] == "/opt/aap/bin/aap"
    accepts(argv[1:])
    assert service["DynamicUser"] == "yes" and service["StateDirectory"] == "aap"
    assert service["Environment"]  # AAP_CONFIG (configparser keeps the last of repeated keys)
    assert service["EnvironmentFile"] == "-/etc/aap/aap.env"
    assert service["NoNewPrivileges"] == "yes" and service["ProtectSystem"] == "strict"
    assert "1" in service["RestartPreventExitStatus"].split()
    assert parser["Install"]["WantedBy"] == "multi-user.target"


# -- LICENSE ------------------------------------------------------------------------------------


def test_license_is_the_apache_2_text_pyproject_names():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply" in text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == {"text": "Apache-2.0"}
