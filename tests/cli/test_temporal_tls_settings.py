"""The Temporal client's TLS from the settings (``MARATHON_TEMPORAL_TLS_*``): off when none is set,
the files' PEM bytes in a ``TLSConfig`` when they are, and a message naming the setting when a
file is missing or the pair is incomplete; and the mTLS paths reach every Temporal client role.
(The dev server has no TLS flags, so no handshake is tested here: see the README's GPU node
recipe for checking a real frontend.)"""

import pytest
from temporalio.service import TLSConfig

from marathon.processes import role_env
from marathon.settings import Settings
from marathon.settings import TemporalTLSError, temporal_tls

PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def _pem(path, data=PEM):
    path.write_bytes(data)
    return path


def test_no_tls_setting_means_plain_tcp():
    assert temporal_tls(Settings()) is False


def test_mtls_reads_the_three_files(tmp_path, monkeypatch):
    monkeypatch.setenv("MARATHON_TEMPORAL_TLS_CERT", str(_pem(tmp_path / "client.pem")))
    monkeypatch.setenv("MARATHON_TEMPORAL_TLS_KEY", str(_pem(tmp_path / "client.key", PEM.replace(b"CERT", b"KEY"))))
    monkeypatch.setenv("MARATHON_TEMPORAL_TLS_CA", str(_pem(tmp_path / "ca.pem", PEM + b"ca")))
    monkeypatch.setenv("MARATHON_TEMPORAL_TLS_SERVER_NAME", "temporal.cluster.internal")
    tls = temporal_tls(Settings())
    assert isinstance(tls, TLSConfig)
    assert tls.client_cert == PEM and tls.server_root_ca_cert == PEM + b"ca"
    assert tls.client_private_key.startswith(b"-----BEGIN KEY")
    assert tls.domain == "temporal.cluster.internal"


def test_ca_alone_is_server_verified_tls(tmp_path):
    tls = temporal_tls(Settings(temporal_tls_ca=_pem(tmp_path / "ca.pem")))
    assert tls.server_root_ca_cert == PEM and tls.client_cert is None and tls.client_private_key is None


def test_incomplete_or_unreadable_settings_are_refused_with_the_setting_named(tmp_path):
    with pytest.raises(TemporalTLSError, match="TLS_CERT and MARATHON_TEMPORAL_TLS_KEY go together"):
        temporal_tls(Settings(temporal_tls_cert=_pem(tmp_path / "client.pem")))
    missing = tmp_path / "nope.key"
    with pytest.raises(TemporalTLSError, match=f"MARATHON_TEMPORAL_TLS_KEY={missing}: cannot read it"):
        temporal_tls(Settings(temporal_tls_cert=_pem(tmp_path / "client.pem"), temporal_tls_key=missing))
    with pytest.raises(TemporalTLSError, match="MARATHON_TEMPORAL_TLS_CA=.*not a PEM file"):
        temporal_tls(Settings(temporal_tls_ca=_pem(tmp_path / "ca.der", b"\x30\x82")))


def test_temporal_clients_keep_the_mtls_paths_and_the_dev_server_does_not_get_them():
    base = {
        "MARATHON_TEMPORAL_TLS_CERT": "/run/marathon/certs/client.pem",
        "MARATHON_TEMPORAL_TLS_KEY": "/run/marathon/certs/client.key",
        "MARATHON_TEMPORAL_TLS_CA": "/run/marathon/certs/ca.pem",
        "MARATHON_LLM_API_KEY": "sk-no",
    }
    for role in ("api", "worker-cpu", "evaluator"):
        env = role_env(role, base)
        assert env["MARATHON_TEMPORAL_TLS_KEY"] == "/run/marathon/certs/client.key", role
    assert "MARATHON_LLM_API_KEY" not in role_env("evaluator", base)
    assert "MARATHON_TEMPORAL_TLS_KEY" not in role_env("temporal", base)


def test_marathon_up_children_talk_plain_tcp_to_their_dev_server(tmp_path, monkeypatch):
    from marathon.stack_config import StackConfig, child_env

    monkeypatch.setenv("MARATHON_TEMPORAL_TLS_CERT", "/remote/client.pem")
    monkeypatch.setenv("marathon_temporal_tls_ca", "/remote/ca.pem")
    env = child_env(StackConfig(home=tmp_path))
    assert not [name for name in env if name.upper().startswith("MARATHON_TEMPORAL_TLS_")]
    assert env["MARATHON_TEMPORAL_ADDRESS"] == "127.0.0.1:7233"


def test_evaluation_queues_are_named_and_read_back_by_the_settings():
    settings = Settings(gpu_task_queue_prefix="team-gpu-")
    assert settings.evaluate_queue("sm90") == "team-gpu-sm90"
    assert settings.arch_of("team-gpu-sm90") == "sm90"
    assert settings.arch_of(settings.evaluate_queue("cpu")) == "cpu"
    assert settings.arch_of("marathon-cpu") is None and settings.arch_of("team-gpu-") is None
