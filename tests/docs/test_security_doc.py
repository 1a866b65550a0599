"""docs/security.md's steps for test certificates, run as a reader runs them: its openssl block, then a
broker with TLS and TLS authentication on the files it made, and `magnetar produce` over pulsar+ssl:// and
`magnetar admin` over https:// with the client certificate."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from security_helpers import tls_urls

SECURITY_DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"
MARK = "<!-- docs-test: tests/docs/test_security_doc.py"
TLS_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"
COMMAND_TIMEOUT_S = 60


def certificate_block() -> str:
    lines = SECURITY_DOC.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(MARK))
    assert lines[start + 1] == "```sh"
    end = next(i for i in range(start + 2, len(lines)) if lines[i].startswith("```"))
    return "\n".join(lines[start + 2 : end]) + "\n"


def test_documented_test_certificates_serve_tls_and_tls_authentication(broker_factory, tmp_path) -> None:
    assert shutil.which("openssl"), "the documented steps use openssl: install it (apt-get install openssl)"
    made = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", certificate_block()],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    assert made.returncode == 0, made.stderr
    pem = {
        name: str(tmp_path / f"{name}.pem")
        for name in ("ca.cert", "broker.cert", "broker.key", "admin.cert", "admin.key")
    }
    broker = broker_factory(
        brokerServicePortTls=0,
        webServicePortTls=0,
        tlsCertificateFilePath=pem["broker.cert"],
        tlsKeyFilePath=pem["broker.key"],
        tlsTrustCertsFilePath=pem["ca.cert"],
        authenticationEnabled="true",
        authenticationProviders=TLS_PROVIDER,
    )
    pulsar_ssl, https = tls_urls(broker)
    credentials = [
        "--tls-trust-cert-path",
        pem["ca.cert"],
        "--auth-plugin",
        "tls",
        "--auth-params",
        f"tlsCertFile:{pem['admin.cert']},tlsKeyFile:{pem['admin.key']}",
    ]
    run = [sys.executable, "-m", "magnetar.cli.main"]
    produced = subprocess.run(
        [*run, "produce", "orders", "-m", "hello", "--url", pulsar_ssl.replace("127.0.0.1", "localhost"), *credentials],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    assert produced.returncode == 0, produced.stderr
    stats = subprocess.run(
        [*run, "admin", "--admin-url", https, *credentials, "topics", "stats", "orders"],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    assert stats.returncode == 0, stats.stderr
    assert '"msgInCounter": 1' in stats.stdout
    assert "Authenticated with role admin (method tls)" in broker.output()
