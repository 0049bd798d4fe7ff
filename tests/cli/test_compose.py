"""docker-compose.yml without a Docker engine: valid against the Compose Specification's JSON schema; every
gpu-finops command it runs parses with the CLI; Prometheus is given the secret its scrape of the service reads; every
file it mounts from the repository exists."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.support.command_lines import CommandLineError, parse
from tests.support.environment import REPO_ROOT

COMPOSE = REPO_ROOT / "docker-compose.yml"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text()))


def test_valid_against_the_compose_specification(shared_data: Path, compose: dict[str, Any]) -> None:
    schema = json.loads((shared_data / "compose-spec" / "compose-spec.json").read_text())
    jsonschema.validate(compose, schema, cls=jsonschema.Draft7Validator)
    broken = {**compose, "services": {"api": {"image": "x", "not_a_compose_key": 1}}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema, cls=jsonschema.Draft7Validator)


def test_every_gpu_finops_command_exists_with_its_options(compose: dict[str, Any]) -> None:
    commands = {name: s["command"] for name, s in compose["services"].items() if "command" in s}
    ours = {name: cmd for name, cmd in commands.items() if cmd[0] == "gpu-finops"}
    assert sorted(ours) == ["api", "collector", "dashboard", "migrate", "scheduler"]
    for name, command in ours.items():
        assert parse(command[1:])[-1] == {"api": "serve", "migrate": "upgrade"}.get(name, name)
    with pytest.raises(CommandLineError, match="no-such-option"):
        parse(["serve", "--no-such-option"])


def test_the_services_of_the_architecture_with_health_checks(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"postgres", "migrate", "api", "scheduler", "dashboard", "prometheus", "grafana"} <= set(services)
    assert services["collector"]["profiles"] == ["gpu"] and services["dcgm-exporter"]["profiles"] == ["gpu"]
    for name in ("postgres", "api", "scheduler", "dashboard", "prometheus", "grafana"):
        assert "healthcheck" in services[name], name
    assert services["api"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_prometheus_scrapes_the_service_with_a_secret_it_is_given(compose: dict[str, Any]) -> None:
    """The API's ``/metrics`` needs an API token: the scrape job reads it from a compose secret of the prometheus
    service, a file under ./secrets/ like the ingest token's."""
    scrape = yaml.safe_load((REPO_ROOT / "dashboards" / "prometheus" / "prometheus.yml").read_text())
    job = next(j for j in scrape["scrape_configs"] if j["job_name"] == "gpu-finops-service")
    assert "api:8080" in job["static_configs"][0]["targets"]
    authorization = job["authorization"]
    assert authorization["type"] == "Bearer"
    directory, _, name = authorization["credentials_file"].rpartition("/")
    assert directory == "/run/secrets"
    assert name in compose["services"]["prometheus"]["secrets"]
    assert compose["secrets"][name]["file"] == f"./secrets/{name}"


def test_mounted_repository_files_exist(compose: dict[str, Any]) -> None:
    """Every file mounted from the repository exists; what is mounted from ./secrets/ is the operator's, never
    committed, and docs/deployment.md says what goes there."""
    deployment = (REPO_ROOT / "docs" / "deployment.md").read_text()
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("./secrets/"):
                assert source in deployment, source
            elif source.startswith("./"):
                assert (REPO_ROOT / source).exists(), source
    assert (REPO_ROOT / "Dockerfile").is_file()


def test_the_scheduler_can_reach_sacct_over_ssh(compose: dict[str, Any]) -> None:
    """The image has an ssh client; the scheduler mounts the ssh files where the documented FINOPS_SACCT_COMMAND
    reads them, and takes that command from an optional file (no Slurm: no file, no import)."""
    assert "openssh-client" in (REPO_ROOT / "Dockerfile").read_text()
    scheduler = compose["services"]["scheduler"]
    assert "./secrets/sacct-ssh:/etc/gpu-finops/sacct-ssh:ro" in scheduler["volumes"]
    assert scheduler["env_file"] == [{"path": "./secrets/sacct-ssh/sacct.env", "required": False}]
    deployment = (REPO_ROOT / "docs" / "deployment.md").read_text()
    assert "FINOPS_SACCT_COMMAND=ssh -F /etc/gpu-finops/sacct-ssh/config slurm-head sacct" in deployment
