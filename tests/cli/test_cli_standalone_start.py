"""`magnetar standalone` when it cannot start (a port taken, its data directory in use, a TLS file missing)
and when its configuration file holds a key it does not know: one line that says what to do, no traceback."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_runner import fails

from security_helpers import Certificates

READY_TIMEOUT_S = 20


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port another program listens on."""
    with socket.create_server(("127.0.0.1", 0)) as other:
        yield other.getsockname()[1]


def last_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    return stderr.strip().splitlines()[-1]


def test_binary_port_in_use_names_the_port_and_the_option(taken_port: int, tmp_path: Path) -> None:
    stderr = fails("standalone", "--data-dir", str(tmp_path / "data"), "--port", str(taken_port), "--http-port", "0")
    assert last_line(stderr) == (
        f"magnetar: port {taken_port} (brokerServicePort) on 127.0.0.1 is in use by another program: "
        "stop it, or choose another port with --port (make run PORT=...)"
    )


def test_http_port_in_use_names_the_port_and_the_option(taken_port: int, tmp_path: Path) -> None:
    stderr = fails("standalone", "--data-dir", str(tmp_path / "data"), "--port", "0", "--http-port", str(taken_port))
    assert last_line(stderr) == (
        f"magnetar: port {taken_port} (webServicePort) on 127.0.0.1 is in use by another program: "
        "stop it, or choose another port with --http-port (make run HTTP_PORT=...)"
    )


def test_second_broker_on_the_same_data_directory(broker_factory) -> None:
    running = broker_factory()
    data = str(running.data_dir)
    stderr = fails("standalone", "--data-dir", data, "--port", "0", "--http-port", "0")
    assert last_line(stderr) == (
        f"magnetar: the data directory {data} is in use: another broker runs on it (it holds {data}/LOCK); "
        "stop that one, or start this one with another --data-dir (make run DATA=...)"
    )


@pytest.mark.parametrize("missing", ["tlsCertificateFilePath", "tlsKeyFilePath", "tlsTrustCertsFilePath"])
def test_missing_tls_file_is_named(missing: str, tmp_path: Path) -> None:
    certificates = Certificates(tmp_path / "pki")
    files = {
        "tlsCertificateFilePath": str(certificates.server),
        "tlsKeyFilePath": str(certificates.server_key),
        "tlsTrustCertsFilePath": str(certificates.ca),
    }
    files[missing] = str(tmp_path / "nowhere.pem")
    settings = [arg for key, value in files.items() for arg in ("-c", f"{key}={value}")]
    stderr = fails(
        "standalone",
        "--data-dir",
        str(tmp_path / "data"),
        "--port",
        "0",
        "--http-port",
        "0",
        "-c",
        "brokerServicePortTls=0",
        *settings,
        code=2,
    )
    assert last_line(stderr) == f"magnetar: {missing}: no file {tmp_path / 'nowhere.pem'}"


def test_misspelled_key_in_the_file_is_named_with_the_likely_one(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerDeduplicationEnable=true\nmanagedLedgerOffloadDriver=aws-s3\n")
    args = [sys.executable, "-m", "magnetar.cli.main", "standalone", "--config", str(conf)]
    args += ["--data-dir", str(tmp_path / "data"), "--port", "0", "--http-port", "0"]
    broker = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    try:
        assert broker.stderr is not None
        lines = []
        for line in broker.stderr:
            lines.append(line)
            if "magnetar ready" in line:
                break
    finally:
        broker.terminate()
        broker.wait(timeout=READY_TIMEOUT_S)
    log = "".join(lines)
    assert (
        f"WARNING magnetar.broker: {conf}:1: unknown setting brokerDeduplicationEnable is ignored "
        "(did you mean brokerDeduplicationEnabled?)"
    ) in log
    assert (
        f"WARNING magnetar.broker: {conf}: settings magnetar does not have are ignored: managedLedgerOffloadDriver"
        in log
    )
    assert "magnetar ready" in log


def test_misspelled_override_is_refused_with_the_likely_key() -> None:
    stderr = fails("standalone", "-c", "brokerDeduplicationEnable=true", code=2)
    assert last_line(stderr) == (
        "magnetar: unknown setting 'brokerDeduplicationEnable' (did you mean brokerDeduplicationEnabled?)"
    )
