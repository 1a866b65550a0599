"""The data source and sink against a broker with TLS, token authentication and authorization, given the
pulsar-spark connector's options: `pulsar.client.*` for the binary protocol, `pulsar.admin.*` for the
admin API (the client's used where the admin's are not given)."""

from __future__ import annotations

import base64
import uuid

import httpx
import pytest
from pyspark.errors import PySparkException

from security_helpers import Certificates, tls_urls, token

SECRET = b"magnetar-spark-secret-key-32byte"
PREFIX = "org.apache.pulsar.broker.authentication."
TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
ADMIN = token(SECRET, "admin")
# A role that may produce and consume in public/default, and nothing else (no admin calls).
APP = token(SECRET, "app")


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def secured(module_broker_factory, certificates):
    broker = module_broker_factory(
        **certificates.tls_settings(
            authenticationEnabled="true",
            authenticationProviders=f"{PREFIX}AuthenticationProviderToken",
            tokenSecretKey="data:;base64," + base64.b64encode(SECRET).decode(),
            authorizationEnabled="true",
            superUserRoles="admin",
        )
    )
    headers = {"Authorization": f"Bearer {ADMIN}"}
    for path, body in (("deduplication", True), ("permissions/app", ["produce", "consume"])):
        response = httpx.post(
            f"{broker.http_url}/admin/v2/namespaces/public/default/{path}", json=body, headers=headers, timeout=10
        )
        assert response.status_code == 204, response.text
    return broker


def _options(broker, certificates: Certificates, **extra: str) -> dict[str, str]:
    service_url, admin_url = tls_urls(broker)
    return {
        "serviceUrl": service_url,
        "adminUrl": admin_url,
        "pulsar.client.tlsTrustCertsFilePath": str(certificates.ca),
    } | extra


def _write(spark, options: dict[str, str], topic: str, values: list[str]) -> None:
    writer = spark.createDataFrame([(v,) for v in values], "value string").coalesce(1).write.mode("append")
    writer = writer.format("magnetar").option("topic", topic)
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.save()


def _read(spark, options: dict[str, str], topic: str) -> list[str]:
    read = spark.read.format("magnetar").option("topic", topic)
    for name, value in options.items():
        read = read.option(name, value)
    return sorted(bytes(row.value).decode() for row in read.load().collect())


def test_tls_and_tokens_for_the_client_and_the_admin_api(spark, secured, certificates) -> None:
    """The app's token on the binary protocol, the admin's on the admin API, both over TLS."""
    topic = f"persistent://public/default/spark-sec-{uuid.uuid4().hex[:8]}"
    options = _options(
        secured,
        certificates,
        **{
            "pulsar.client.authPluginClassName": TOKEN_PLUGIN,
            "pulsar.client.authParams": f"token:{APP}",
            "pulsar.admin.authPluginClassName": TOKEN_PLUGIN,
            "pulsar.admin.authParams": f"token:{ADMIN}",
        },
    )
    _write(spark, options, topic, ["a", "b", "c"])
    assert _read(spark, options, topic) == ["a", "b", "c"]


def test_the_admin_api_takes_the_client_options_when_it_has_none(spark, secured, certificates, tmp_path) -> None:
    topic = f"persistent://public/default/spark-sec-{uuid.uuid4().hex[:8]}"
    token_file = tmp_path / "admin.token"
    token_file.write_text(ADMIN)
    options = _options(
        secured,
        certificates,
        **{"pulsar.client.authPluginClassName": TOKEN_PLUGIN, "pulsar.client.authParams": f"file://{token_file}"},
    )
    _write(spark, options, topic, ["x"])
    assert _read(spark, options, topic) == ["x"]


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        pytest.param({}, "AuthenticationError: Unable to authenticate", id="no-credentials"),
        pytest.param(
            {"pulsar.client.authPluginClassName": TOKEN_PLUGIN, "pulsar.client.authParams": "token:" + APP},
            "403",
            id="app-token-on-the-admin-api",
        ),
        pytest.param(
            {"pulsar.admin.authPluginClassName": TOKEN_PLUGIN, "pulsar.admin.authParams": f"token:{ADMIN}"},
            "AuthenticationError",
            id="no-client-credentials",
        ),
    ],
)
def test_missing_or_insufficient_credentials_fail_the_read(spark, secured, certificates, extra, reason) -> None:
    topic = f"persistent://public/default/spark-sec-{uuid.uuid4().hex[:8]}"
    good = _options(
        secured,
        certificates,
        **{"pulsar.client.authPluginClassName": TOKEN_PLUGIN, "pulsar.client.authParams": f"token:{ADMIN}"},
    )
    _write(spark, good, topic, ["x"])
    with pytest.raises(PySparkException) as failed:
        _read(spark, _options(secured, certificates, **extra), topic)
    assert reason in str(failed.value)
