"""The cluster deployment cannot run here (no Docker engine), so its files are checked statically:
the YAML parses, every Marathon service runs a command the ``marathon`` CLI really has, GPU
workers reserve NVIDIA devices, nothing is published beyond localhost, and the search attributes
registered in the cluster are the ones the workflow upserts."""

import re
import shlex
from pathlib import Path

import pytest
import yaml  # pyyaml is a test dependency (pyproject's "test" extra)

from marathon.cli import build_parser
from workflows.search_attributes import SEARCH_ATTRIBUTES

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def marathon_services(compose):
    return {name: service for name, service in compose["services"].items() if service.get("image", "").startswith("marathon:")}


def test_compose_has_temporal_on_postgres_ui_api_and_workers(compose):
    services = compose["services"]
    assert services["temporal"]["image"].startswith("temporalio/server:")
    assert services["temporal"]["environment"]["DB"] == "postgres12"
    assert services["temporal-schema"]["image"].startswith("temporalio/admin-tools:")
    assert services["temporal-ui"]["image"].startswith("temporalio/ui:")
    assert services["postgresql"]["image"].startswith("postgres:")
    assert {"api", "worker-cpu", "worker-gpus"} <= set(services)


def test_every_marathon_command_exists_in_the_cli(compose):
    parser = build_parser()
    checked = 0
    for name, service in marathon_services(compose).items():
        command = service["command"]
        if command[0] == "marathon":
            args = parser.parse_args(command[1:])
            assert callable(args.handler), name
            checked += 1
        else:
            assert command[:2] == ["uvicorn", "api.main:create_app"], name
    assert checked >= 3


def test_one_gpu_service_runs_a_worker_per_gpu_of_the_machine(compose):
    """No hand-copied block per GPU: one service reserves them all and `marathon worker gpus`
    starts a worker on each (tests/cli/test_gpu_node.py runs that supervisor)."""
    gpu_services = {name: service for name, service in compose["services"].items() if "gpu" in name}
    assert list(gpu_services) == ["worker-gpus"]
    service = gpu_services["worker-gpus"]
    assert service["command"] == ["marathon", "worker", "gpus"]
    (device,) = service["deploy"]["resources"]["reservations"]["devices"]
    assert device == {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}
    assert "CUDA_VISIBLE_DEVICES" not in service["environment"]  # the supervisor pins each worker
    assert service["healthcheck"]["test"] == ["CMD", "marathon", "worker", "health"]
    assert build_parser().parse_args(service["healthcheck"]["test"][2:]).kind == "health"


def test_ports_are_published_on_localhost_only(compose):
    published = [
        (name, port) for name, service in compose["services"].items() for port in service.get("ports", [])
    ]
    assert published
    for name, port in published:
        assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond localhost"


def test_cluster_registers_the_workflow_search_attributes():
    script = (REPO / "deploy/temporal/register.sh").read_text()
    (loop,) = re.findall(r"for pair in ([^;]+);", script)
    registered = dict(pair.split("=") for pair in shlex.split(loop))
    assert registered == SEARCH_ATTRIBUTES


def test_mounted_deploy_files_exist(compose):
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (REPO / source).exists(), f"{name} mounts missing {source}"
    assert (REPO / compose["services"]["api"]["build"]["dockerfile"]).exists()


def test_every_long_lived_service_has_a_health_check(compose):
    """Marathon's services and Temporal, which run until stopped, say when they stop serving (the
    Temporal UI's image is not ours: what it ships to probe itself with is not promised)."""
    long_lived = {name: service for name, service in compose["services"].items()
                  if service.get("restart") == "unless-stopped" and name != "temporal-ui"}
    assert set(long_lived) == {"api", "worker-cpu", "worker-gpus", "temporal"}
    missing = [name for name, service in long_lived.items() if "healthcheck" not in service]
    assert missing == []
    test = compose["services"]["worker-cpu"]["healthcheck"]["test"]
    assert test == ["CMD", "marathon", "worker", "health", "--polls", "cpu"]
    parsed = build_parser().parse_args(test[2:])
    assert (parsed.kind, parsed.polls) == ("health", "cpu")
