"""deploy/gpu-node.yml, checked statically (no Docker engine here): one service that runs a
command the CLI has with all the node's GPUs, a health check that calls a real CLI command,
nothing published, certificates mounted read-only, TLS to Temporal and PostgreSQL through
settings that really exist, and the same image as docker-compose.yml's GPU workers."""

import re
from pathlib import Path

import pytest
import yaml  # pyyaml is a test dependency (pyproject's "test" extra)

from marathon.cli import build_parser
from marathon.gpu_node import NODE_STOP_GRACE_S
from marathon.settings import Settings
from marathon.workers import GPU_GRACEFUL_SHUTDOWN

REPO = Path(__file__).resolve().parents[2]
CERTS = "/run/marathon/certs"


@pytest.fixture(scope="module")
def node():
    return yaml.safe_load((REPO / "deploy/gpu-node.yml").read_text())


@pytest.fixture(scope="module")
def service(node):
    (only,) = node["services"].values()
    return only


def _seconds(duration: str) -> float:
    units = {"h": 3600, "m": 60, "s": 1}
    parts = re.findall(r"(\d+)([hms])", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(int(n) * units[u] for n, u in parts)


def test_one_service_runs_the_gpu_node_supervisor_on_every_gpu(service):
    args = build_parser().parse_args(service["command"][1:])
    assert service["command"][0] == "marathon" and args.kind == "gpus" and callable(args.handler)
    (device,) = service["deploy"]["resources"]["reservations"]["devices"]
    assert device == {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}
    assert "CUDA_VISIBLE_DEVICES" not in service["environment"]


def test_health_check_calls_a_real_cli_command(service):
    test = service["healthcheck"]["test"]
    assert test[:2] == ["CMD", "marathon"]
    assert build_parser().parse_args(test[2:]).kind == "health"
    assert _seconds(service["healthcheck"]["interval"]) <= 60


def test_publishes_no_port_and_mounts_certificates_read_only(service):
    assert "ports" not in service and "expose" not in service and service.get("network_mode") != "host"
    (volume,) = service["volumes"]
    source, target, mode = volume.rsplit(":", 2)
    assert source.startswith("${MARATHON_CERTS_DIR:?") and target == CERTS and mode == "ro"


def test_tls_settings_are_ones_marathon_reads_and_point_into_the_mount(service):
    env = service["environment"]
    fields = Settings.model_fields
    tls = {name: value for name, value in env.items() if name.startswith("MARATHON_TEMPORAL_TLS_")}
    assert {"MARATHON_TEMPORAL_TLS_CERT", "MARATHON_TEMPORAL_TLS_KEY", "MARATHON_TEMPORAL_TLS_CA"} <= set(tls)
    for name, value in tls.items():
        assert name.removeprefix("MARATHON_").lower() in fields, name
        if name != "MARATHON_TEMPORAL_TLS_SERVER_NAME":
            assert value.startswith(CERTS + "/"), name
    for name in env:
        if name.startswith("MARATHON_"):
            assert name.removeprefix("MARATHON_").lower() in fields, name
    assert env["MARATHON_TEMPORAL_ADDRESS"].startswith("${MARATHON_TEMPORAL_ADDRESS:?")
    database = env["DATABASE_URL"]
    assert database.startswith("postgresql://") and "sslmode=verify-full" in database
    assert f"sslrootcert={CERTS}/" in database
    # The LLM key never reaches an evaluation node.
    assert not any(name.startswith("MARATHON_LLM_") for name in env)


def test_running_evaluations_get_to_finish_before_docker_kills_the_container(service):
    assert GPU_GRACEFUL_SHUTDOWN.total_seconds() < NODE_STOP_GRACE_S < _seconds(service["stop_grace_period"])


def test_same_image_as_the_clusters_gpu_workers(service):
    cluster = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]["worker-gpus"]
    assert service["image"] == cluster["image"]
    assert service["build"]["args"] == cluster["build"]["args"]
    assert service["build"]["dockerfile"] == cluster["build"]["dockerfile"]
    assert (REPO / "deploy" / service["build"]["context"]).resolve() == REPO
    assert service["command"] == cluster["command"] and service["healthcheck"] == cluster["healthcheck"]
    assert service["stop_grace_period"] == cluster["stop_grace_period"]
    assert service["security_opt"] == cluster["security_opt"]
