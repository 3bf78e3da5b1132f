"""The Kafka security settings as the daemons read them from the environment: what kafka-python is
given for each protocol, a SASL_SSL without a login refused at load, and the SCRAM password never
printed. The brokers' side is tests/integration/test_kafka_tls.py."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from vocab.settings import Settings


def test_sasl_ssl_gives_kafka_python_tls_and_a_scram_login(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIOPS_KAFKA__SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("AIOPS_KAFKA__SSL_CAFILE", "/etc/aiops/kafka-ca.pem")
    monkeypatch.setenv("AIOPS_KAFKA__SASL_USERNAME", "aiops")
    monkeypatch.setenv("AIOPS_KAFKA__SASL_PASSWORD", "s3cret-scram")
    settings = Settings()
    assert settings.kafka.client_security() == {
        "security_protocol": "SASL_SSL",
        "ssl_check_hostname": True,
        "ssl_cafile": "/etc/aiops/kafka-ca.pem",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "aiops",
        "sasl_plain_password": "s3cret-scram",
    }
    assert "s3cret-scram" not in repr(settings) and "s3cret-scram" not in str(settings.kafka)


def test_ssl_gives_no_login(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIOPS_KAFKA__SECURITY_PROTOCOL", "SSL")
    monkeypatch.setenv("AIOPS_KAFKA__SASL_USERNAME", "aiops")
    monkeypatch.setenv("AIOPS_KAFKA__SASL_PASSWORD", "s3cret-scram")
    assert Settings().kafka.client_security() == {"security_protocol": "SSL", "ssl_check_hostname": True}


@pytest.mark.parametrize("missing", ["AIOPS_KAFKA__SASL_USERNAME", "AIOPS_KAFKA__SASL_PASSWORD"])
def test_sasl_ssl_without_a_login_is_refused_at_load(monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    monkeypatch.setenv("AIOPS_KAFKA__SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("AIOPS_KAFKA__SASL_USERNAME", "aiops")
    monkeypatch.setenv("AIOPS_KAFKA__SASL_PASSWORD", "s3cret-scram")
    monkeypatch.delenv(missing)
    with pytest.raises(ValidationError, match="needs sasl_username and sasl_password"):
        Settings()


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "PLAIN"])
def test_protocols_not_offered_are_refused(monkeypatch: pytest.MonkeyPatch, protocol: str) -> None:
    monkeypatch.setenv("AIOPS_KAFKA__SECURITY_PROTOCOL", protocol)
    with pytest.raises(ValidationError):
        Settings()


def test_no_mechanism_but_scram_sha_512(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIOPS_KAFKA__SASL_MECHANISM", "PLAIN")
    with pytest.raises(ValidationError):
        Settings()
