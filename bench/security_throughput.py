"""What TLS and token authentication cost: connection set-up time and end-to-end throughput, each case
against a fresh broker: plain, TLS, token, TLS + token.

The broker's certificate (a throwaway CA and a server certificate for 127.0.0.1, EC P-256) and the
token's HS256 key are made here with `cryptography` and PyJWT. Set-up: `--connects` times, a new
official client creates a producer on a new topic (TCP + TLS handshake + CONNECT with its credentials +
partition metadata + lookup + PRODUCER), median and worst in ms. Throughput, twice:
- official clients: one produces `--messages` 100 B messages with KeyBased batching (send_async, 1,000 in
  flight) while a Key_Shared consumer of another client receives and acks them. The official Python
  client spends ~40 µs of CPU per message of its own, so this rate is the client's;
- the batched maximum: `magnetar perf produce` and `perf consume` with `--client magnetar` (~2 µs per
  message), each its own process, `--max-messages` messages, 4 consumers: the broker is the bottleneck.
Reported per run: the receive rate and the broker's CPU µs per message (utime + stime from /proc over
the run). Prints a table and writes bench/results/security_throughput.json.

    python bench/security_throughput.py [--messages 200000] [--max-messages 500000] [--connects 20]
"""

from __future__ import annotations

import argparse
import base64
import datetime
import ipaddress
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import jwt
import pulsar
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

sys.path.insert(0, str(Path(__file__).parent))

from broker_process import MAGNETAR, Broker, cpu_seconds, load_line, machine

RESULTS = Path(__file__).parent / "results"
SIZE_BYTES = 100
KEYS = 100
IN_FLIGHT = 1000
PREFIX = "org.apache.pulsar.broker.authentication."


def _certificates(directory: Path) -> tuple[Path, Path, Path]:
    """ca.pem, server.pem and server-key.pem for 127.0.0.1."""

    def name(common_name: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

    now = datetime.datetime.now(datetime.UTC)
    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("bench CA"))
        .issuer_name(name("bench CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server = (
        x509.CertificateBuilder()
        .subject_name(name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "ca.pem", directory / "server.pem", directory / "server-key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


def _cases(directory: Path) -> list[tuple[str, dict[str, str], bool, str | None]]:
    """(name, broker settings, TLS?, token) per case."""
    ca, certificate, key = _certificates(directory)
    secret = b"bench-secret-key-of-thirty-two-b"
    token = jwt.encode({"sub": "bench"}, secret, algorithm="HS256")
    tls = {
        "brokerServicePortTls": "0",
        "tlsCertificateFilePath": str(certificate),
        "tlsKeyFilePath": str(key),
        "tlsTrustCertsFilePath": str(ca),
    }
    auth = {
        "authenticationEnabled": "true",
        "authenticationProviders": f"{PREFIX}AuthenticationProviderToken",
        "tokenSecretKey": "data:;base64," + base64.b64encode(secret).decode(),
    }
    return [
        ("plain", {}, False, None),
        ("tls", tls, True, None),
        ("token", auth, False, token),
        ("tls+token", tls | auth, True, token),
    ]


def _client_options(ca: Path, tls: bool, token: str | None) -> dict:
    options: dict = {"logger": pulsar.ConsoleLogger(pulsar.LoggerLevel.Error), "operation_timeout_seconds": 30}
    if tls:
        options["tls_trust_certs_file_path"] = str(ca)
    if token:
        options["authentication"] = pulsar.AuthenticationToken(token)
    return options


def _service_url(broker: Broker, tls: bool) -> str:
    if not tls:
        return broker.url
    text = broker.log_path.read_text()
    return text.split("TLS ports: ", 1)[1].split(",", 1)[0]


def _connects(url: str, options: dict, count: int) -> list[float]:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        client = pulsar.Client(url, **options)
        client.create_producer(f"persistent://public/default/connect-{uuid.uuid4().hex[:8]}")
        times.append((time.perf_counter() - start) * 1000)
        client.close()
    return times


def _throughput(url: str, options: dict, messages: int, pid: int) -> dict:
    topic = f"persistent://public/default/bench-{uuid.uuid4().hex[:8]}"
    consuming, producing = pulsar.Client(url, **options), pulsar.Client(url, **options)
    consumer = consuming.subscribe(
        topic, "bench", consumer_type=pulsar.ConsumerType.KeyShared, receiver_queue_size=5000
    )
    producer = producing.create_producer(
        topic,
        batching_type=pulsar.BatchingType.KeyBased,
        batching_max_publish_delay_ms=1,
        max_pending_messages=IN_FLIGHT,
        block_if_queue_full=True,
    )
    received = threading.Event()

    def receive() -> None:
        count = 0
        while count < messages:
            batch = consumer.batch_receive()
            for message in batch:
                consumer.acknowledge(message)
            count += len(batch)
        received.set()

    payload = b"x" * SIZE_BYTES
    cpu_start, start = cpu_seconds(pid), time.perf_counter()
    reader = threading.Thread(target=receive, daemon=True)
    reader.start()
    for index in range(messages):
        producer.send_async(payload, None, partition_key=f"k{index % KEYS}")
    producer.flush()
    received.wait()
    elapsed, cpu = time.perf_counter() - start, cpu_seconds(pid) - cpu_start
    consuming.close()
    producing.close()
    return {"msg_per_s": messages / elapsed, "broker_cpu_us_per_msg": cpu / messages * 1e6, "seconds": elapsed}


def _perf_arguments(url: str, ca: Path, tls: bool, token: str | None) -> list[str]:
    arguments = ["--service-url", url]
    if tls:
        arguments += ["--tls-trust-cert-path", str(ca)]
    if token:
        arguments += ["--auth-plugin", "token", "--auth-params", f"token:{token}"]
    return arguments


def _batched_maximum(
    url: str, ca: Path, tls: bool, token: str | None, messages: int, pid: int, directory: Path
) -> dict:
    """perf consume (4 Key_Shared consumers) and perf produce (KeyBased batches), both --client magnetar."""
    topic = f"persistent://public/default/max-{uuid.uuid4().hex[:8]}"
    security = _perf_arguments(url, ca, tls, token)
    summary = directory / f"consume-{uuid.uuid4().hex[:6]}.json"
    consume = subprocess.Popen(
        MAGNETAR
        + ["perf", "consume", "--topic", topic, "--type", "Key_Shared", "--consumers", "4"]
        + ["--messages", str(messages), "--client", "magnetar", "--json", str(summary)]
        + security,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert consume.stdout is not None
    for line in consume.stdout:
        if "subscribed" in line:
            break
    cpu_start = cpu_seconds(pid)
    produce = subprocess.run(
        MAGNETAR
        + ["perf", "produce", "--topic", topic, "--messages", str(messages), "--size", str(SIZE_BYTES)]
        + ["--keys", str(KEYS), "--max-pending", "10000", "--client", "magnetar"]
        + security,
        stdout=subprocess.DEVNULL,
        check=True,
    )
    assert produce.returncode == 0
    consume.communicate()
    cpu = cpu_seconds(pid) - cpu_start
    received = json.loads(summary.read_text())
    return {"msg_per_s": received["msg_per_s"], "broker_cpu_us_per_msg": cpu / messages * 1e6}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--connects", type=int, default=20)
    parser.add_argument("--max-messages", type=int, default=500_000, help="messages of the batched-maximum run")
    args = parser.parse_args()
    before = machine()
    results = []
    with tempfile.TemporaryDirectory(prefix="magnetar-bench-security-") as tmp:
        directory = Path(tmp)
        ca = directory / "ca.pem"
        for name, settings, tls, token in _cases(directory):
            broker = Broker(directory / f"data-{name}", settings)
            broker.start()
            try:
                url, options = _service_url(broker, tls), _client_options(ca, tls, token)
                connects = _connects(url, options, args.connects)
                run = _throughput(url, options, args.messages, broker.pid)
                maximum = _batched_maximum(url, ca, tls, token, args.max_messages, broker.pid, directory)
            finally:
                broker.stop()
            results.append(
                {
                    "case": name,
                    "connect_ms_median": statistics.median(connects),
                    "connect_ms_max": max(connects),
                    **run,
                    "max_msg_per_s": maximum["msg_per_s"],
                    "max_broker_cpu_us_per_msg": maximum["broker_cpu_us_per_msg"],
                }
            )
            print(f"{name}: {results[-1]}", flush=True)
    after = machine()
    print(
        f"\n{'case':<10} {'connect ms (median/max)':>24} {'official msg/s':>15} {'broker µs/msg':>14}"
        f" {'max msg/s':>10} {'broker µs/msg':>14}"
    )
    for row in results:
        print(
            f"{row['case']:<10} {row['connect_ms_median']:>11.1f} / {row['connect_ms_max']:>9.1f} "
            f"{row['msg_per_s']:>15,.0f} {row['broker_cpu_us_per_msg']:>14.1f}"
            f" {row['max_msg_per_s']:>10,.0f} {row['max_broker_cpu_us_per_msg']:>14.1f}"
        )
    print(load_line(before, after))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "security_throughput.json"
    out.write_text(
        json.dumps(
            {
                "machine": before,
                "after": after,
                "messages": args.messages,
                "max_messages": args.max_messages,
                "results": results,
            },
            indent=2,
        )
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
