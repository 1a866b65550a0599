"""A cluster of processes on this machine, black box: real ZooKeeper, real bookies and magnetar brokers
(`LocalCluster`, tests/cluster_processes.py), driven with the official Python client and the HTTP API.

Three brokers register and share the topics; a client connected to one broker is sent to the owner of its
topic; a topic whose owner is killed -9 is served by another broker with every receipted message; and
`magnetar local-cluster`, the command, starts a cluster a client uses and stops it, children and all, on
Ctrl-C. One cluster serves the module's tests; the command's test runs first, before that cluster starts,
so that the two never share the 2 cores."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from cluster_processes import running_cluster
from magnetar.cli import local_bookkeeper
from magnetar.cli.local_cluster import LocalCluster
from magnetar.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
CLI_START_TIMEOUT_S = 120
RECEIVE_TIMEOUT_MS = 1000
# A topic moved after a kill -9 is served again once the dead broker's session expired (5 s here), a
# lookup found the new owner and that owner recovered the topic's ledgers.
MOVE_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory, brokers=3, bookies=3, session_timeout_ms=5000) as cluster:
        yield cluster


@pytest.fixture
def client_factory() -> Iterator:
    clients: list[pulsar.Client] = []

    def make(url: str) -> pulsar.Client:
        client = pulsar.Client(url, operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def _children(pid: int) -> set[int]:
    """The PIDs whose parent is `pid`, from /proc."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_for_output(process: subprocess.Popen, stdout: Path, marker: str, timeout_s: float) -> str:
    """The command's stdout once it holds `marker`."""
    deadline = time.monotonic() + timeout_s
    while marker not in (output := stdout.read_text()):
        assert process.poll() is None, f"the command exited with {process.returncode}:\n{output}"
        assert time.monotonic() < deadline, f"no {marker!r} in {timeout_s} s:\n{output}"
        time.sleep(0.1)
    return output


def _round_trip(client: pulsar.Client, topic: str, count: int) -> None:
    consumer = client.subscribe(topic, "round-trip", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    sent = {f"message-{i}".encode() for i in range(count)}
    for payload in sorted(sent):
        producer.send(payload)
    received = set()
    while received != sent:
        message = consumer.receive(timeout_millis=10_000)
        received.add(message.data())
        consumer.acknowledge(message)


def test_the_command_runs_a_cluster_until_ctrl_c_and_leaves_no_process(tmp_path: Path, client_factory) -> None:
    directory = tmp_path / "cluster"
    command = [sys.executable, "-m", "magnetar.cli.main", "local-cluster", "--brokers", "2", "--bookies", "1"]
    command += ["--dir", str(directory), "--port", "0", "--http-port", "0", "--session-timeout-ms", "5000"]
    stdout, stderr = tmp_path / "stdout.log", tmp_path / "stderr.log"
    with open(stdout, "w") as out, open(stderr, "w") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err)
    try:
        output = _wait_for_output(process, stdout, "Ctrl-C stops the cluster.", CLI_START_TIMEOUT_S)
        service_url = re.search(r"^service URL +(pulsar://\S+)$", output, re.MULTILINE)
        assert service_url is not None, output
        assert len(service_url[1].split(",")) == 2
        pids = {int(pid) for pid in re.findall(r"  pid (\d+)  ", output)}
        # ZooKeeper, the bookie and the two brokers, each named with its pid and its log.
        assert len(pids) == 4
        assert _children(process.pid) == pids
        for log in re.findall(r"  log (\S+)", output):
            assert Path(log).is_file()
        _round_trip(client_factory(service_url[1]), f"cli-{uuid.uuid4().hex[:8]}", 10)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
        assert "magnetar local cluster: stopped" in stdout.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert [pid for pid in pids if _alive(pid)] == []
    assert stderr.read_text() == ""


def test_the_command_refuses_a_port_in_use_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "magnetar.cli.main", "local-cluster", "--port", str(port), "--http-port", "0"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"magnetar: port {port} (brokerServicePort of broker-0) on 127.0.0.1 is in use by another program: "
        "stop it, or choose other ports with --port and --http-port (0 picks free ones)"
    ]


def test_the_command_says_what_to_run_without_the_jars(tmp_path, monkeypatch, capsys) -> None:
    missing = tmp_path / "build" / "bookkeeper" / "classpath.txt"
    monkeypatch.setattr(local_bookkeeper, "CLASSPATH_FILE", missing)
    assert main(["local-cluster", "--dir", str(tmp_path / "cluster"), "--port", "0", "--http-port", "0"]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert f"{missing} is missing: run `make bookkeeper`" in lines[0]


def test_make_cluster_installs_the_broker_and_the_jars_then_runs_the_command() -> None:
    dry_run = subprocess.run(
        ["make", "-n", "-B", "cluster", "BROKERS=2"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert dry_run.returncode == 0, dry_run.stderr
    commands = dry_run.stdout
    assert ".venv/bin/pip install -e .\n" in commands
    assert "compat/bookkeeper/pom.xml" in commands
    assert ".venv/bin/magnetar local-cluster --brokers 2 --bookies 3 --port 6650 --http-port 8080" in commands


def test_three_brokers_register_and_share_the_topics(cluster: LocalCluster) -> None:
    ids = sorted(broker.broker_id for broker in cluster.brokers)
    for index in range(3):
        assert sorted(cluster.active_brokers(index)) == ids
    owners = {cluster.owner(f"spread-{i}") for i in range(12)}
    assert len(owners) > 1


def test_a_client_of_one_broker_is_sent_to_the_owner(cluster: LocalCluster, client_factory) -> None:
    topic = next(name for name in (f"redirect-{i}" for i in range(40)) if cluster.owner(name) == 1)
    consumer = client_factory(cluster.broker_url(2)).subscribe(topic, "sub")
    producer = client_factory(cluster.broker_url(0)).create_producer(topic)
    for i in range(10):
        producer.send(f"redirected-{i}".encode())
    received = [consumer.receive(timeout_millis=10_000).data() for _ in range(10)]
    assert received == [f"redirected-{i}".encode() for i in range(10)]


def _state(pid: int | None) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_broker_paused_and_continued(cluster: LocalCluster) -> None:
    pid = cluster.brokers[2].process.pid
    cluster.stop_broker(2)
    assert _state(pid) == "T"
    cluster.cont_broker(2)
    assert _state(pid) != "T"
    assert len(cluster.active_brokers(2)) == 3


def test_receipted_messages_survive_a_kill_9_of_their_owner(cluster: LocalCluster, client_factory) -> None:
    """The subscription exists and has acknowledged 50 messages before the kill; it is read again, on the
    new owner, by a consumer that was not connected before (one that was would hold the messages already
    in its receiver queue)."""
    topic = f"survives-{uuid.uuid4().hex[:8]}"
    client = client_factory(cluster.service_url)
    consumer = client.subscribe(topic, "orders", consumer_type=pulsar.ConsumerType.KeyShared)
    producer = client.create_producer(topic, batching_enabled=False)
    sent = {f"order-{i}".encode() for i in range(200)}
    for i in range(200):
        producer.send(f"order-{i}".encode(), partition_key=f"customer-{i % 10}")
    received = set()
    for _ in range(50):
        message = consumer.receive(timeout_millis=10_000)
        received.add(message.data())
        consumer.acknowledge(message)
    consumer.close()
    owner = cluster.owner(topic)
    cluster.kill_broker(owner)
    consumer = client.subscribe(topic, "orders", consumer_type=pulsar.ConsumerType.KeyShared)
    deadline = time.monotonic() + MOVE_TIMEOUT_S
    while received != sent and time.monotonic() < deadline:
        try:
            message = consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
        except pulsar.Timeout:
            continue
        received.add(message.data())
        consumer.acknowledge(message)
    assert sorted(sent - received) == []
    assert cluster.owner(topic) != owner
    cluster.restart_broker(owner)
    assert len(cluster.active_brokers(owner)) == 3
