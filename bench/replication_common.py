"""What the geo-replication benchmarks share: two `magnetar standalone` processes, one per cluster, wired
into a replication pair over the admin HTTP API, and the `magnetar perf` processes that load them.

`ClusterBroker` is `broker_process.Broker` with a cluster name and ports chosen up front, so that a
stopped broker starts again on the same ports and data directory (the other cluster keeps its URLs
registered). Setup is what an operator does on every cluster: register every cluster, allow them for
tenant `bench`, create the namespaces with their `replication_clusters`. Only `urllib`, no test code.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from broker_process import MAGNETAR, READY, START_TIMEOUT_S, Broker

RESULTS = Path(__file__).parent / "results"
TENANT = "bench"
CLUSTERS = ("r1", "r2")
CONSUMERS = 4
SIZE_BYTES = 100
HTTP_TIMEOUT_S = 15
# What is worth showing of a broker's log when replication misbehaves.
LOG_PATTERN = re.compile(r"[Rr]eplicat|ERROR|WARNING|Traceback|Error:|exception", re.IGNORECASE)


def free_port() -> int:
    """A loopback port nobody listens on now (the kernel's pick; another process could take it before the
    broker does, which on a bench machine does not happen in practice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ClusterBroker(Broker):
    """A broker of cluster `cluster` on fixed ports; `start()` again after `stop()` restarts it on the same
    ports and data directory. The log is appended to, so readiness is the READY line written after the
    log's size at this start."""

    def __init__(self, cluster: str, data_dir: Path, settings: dict[str, str] | None = None) -> None:
        super().__init__(data_dir, {"clusterName": cluster, **(settings or {})})
        self.cluster = cluster
        self.port = free_port()
        self.http_port = free_port()
        self.url = f"pulsar://127.0.0.1:{self.port}"
        self.http_url = f"http://127.0.0.1:{self.http_port}"

    def start(self) -> None:
        args = MAGNETAR + ["standalone", "--data-dir", str(self.data_dir)]
        args += ["--port", str(self.port), "--http-port", str(self.http_port)]
        for key, value in self.settings.items():
            args += ["-c", f"{key}={value}"]
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        # The broker writes to its own copy of the descriptor: ours is closed once it is started.
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            match = READY.search(self.log_text(offset))
            if match:
                if match.group(1) != self.url or match.group(3) != self.http_url:
                    self.stop()
                    raise RuntimeError(
                        f"broker {self.cluster} ready at {match.group(1)}, {match.group(3)}, "
                        f"not at {self.url}, {self.http_url}"
                    )
                return
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"broker {self.cluster} exited with {self.process.returncode}:\n{self.log_text(offset)}"
                )
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"broker {self.cluster} not ready in {START_TIMEOUT_S} s:\n{self.log_text(offset)}")

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_text(self, offset: int = 0) -> str:
        with open(self.log_path, errors="replace") as file:
            file.seek(offset)
            return file.read()

    def log_excerpt(self, lines: int = 40) -> str:
        """The last `lines` lines about replication, warnings and errors in this broker's log."""
        try:
            relevant = [line for line in self.log_text().splitlines() if LOG_PATTERN.search(line)]
        except OSError as error:
            relevant = [f"<{error}>"]
        return f"--- {self.cluster} ({self.url}, log {self.log_path}) ---\n" + "\n".join(relevant[-lines:])


# ------------------------------------------------------------------------------------------ HTTP


def admin(
    broker: ClusterBroker, method: str, path: str, body: Any = None, expect: tuple[int, ...] = (200, 204)
) -> tuple[int, Any]:
    """One admin call; (status, decoded JSON or text). An unexpected status raises with the answer."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{broker.http_url}{path}", data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read().decode(errors="replace")
    if status not in expect:
        raise RuntimeError(
            f"{method} {broker.http_url}{path} {data.decode() if data else ''} -> {status}: {text[:2000]}"
        )
    try:
        return status, json.loads(text) if text else None
    except json.JSONDecodeError:
        return status, text


def wire(brokers: dict[str, ClusterBroker], namespaces: dict[str, list[str]]) -> None:
    """On every broker: every cluster registered with its URLs, tenant `bench` allowed on all of them; each
    namespace `bench/<ns>` created with its replication clusters on each of those clusters."""
    for broker in brokers.values():
        for cluster, other in brokers.items():
            body = {"serviceUrl": other.http_url, "brokerServiceUrl": other.url}
            # Pulsar 4.0.7 (and magnetar) answer 200, a magnetar from before answers 204: --external may be either.
            status, _ = admin(broker, "PUT", f"/admin/v2/clusters/{cluster}", body, expect=(200, 204, 409))
            if status == 409:  # a broker's own cluster exists from its first start: update its URLs
                admin(broker, "POST", f"/admin/v2/clusters/{cluster}", body, expect=(200, 204))
        body = {"adminRoles": [], "allowedClusters": sorted(brokers)}
        admin(broker, "PUT", f"/admin/v2/tenants/{TENANT}", body, expect=(204,))
    for namespace, clusters in namespaces.items():
        for cluster in clusters:
            body = {"replication_clusters": clusters}
            admin(brokers[cluster], "PUT", f"/admin/v2/namespaces/{TENANT}/{namespace}", body, expect=(204,))
            _, got = admin(brokers[cluster], "GET", f"/admin/v2/namespaces/{TENANT}/{namespace}/replication")
            if sorted(got) != sorted(clusters):
                raise RuntimeError(f"replication clusters of {TENANT}/{namespace} on {cluster}: {got}, not {clusters}")


def topic_stats(broker: ClusterBroker, topic: str) -> dict[str, Any] | None:
    """GET .../stats of `persistent://t/ns/x` on `broker`; None while the topic does not exist there."""
    path = "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/stats"
    status, stats = admin(broker, "GET", path, expect=(200, 404))
    return stats if status == 200 else None


def start_pair(directory: Path, settings: dict[str, str] | None = None) -> dict[str, ClusterBroker]:
    """Brokers r1 and r2, fresh data directories in `directory`, started (stopped again if one fails)."""
    brokers = {name: ClusterBroker(name, directory / f"data-{name}", settings) for name in CLUSTERS}
    try:
        for broker in brokers.values():
            broker.start()
    except BaseException:
        stop_all(brokers)
        raise
    return brokers


def stop_all(brokers: dict[str, ClusterBroker]) -> None:
    for broker in brokers.values():
        try:
            broker.stop()
        except Exception as error:  # noqa: BLE001 - one broker failing to stop must not leave the other running
            print(f"stopping {broker.cluster}: {error}", file=sys.stderr)


@contextmanager
def running_pair(
    namespaces: dict[str, list[str]], directory_root: str | None, keep: bool, settings: dict[str, str] | None = None
) -> Iterator[tuple[dict[str, ClusterBroker], Path]]:
    """r1 and r2 started in a fresh directory (with broker `settings`, passed as `-c key=value`) and wired
    with `namespaces`; stopped afterwards, and the directory removed unless `keep`."""
    directory = Path(tempfile.mkdtemp(prefix="magnetar-bench-repl-", dir=directory_root))
    brokers: dict[str, ClusterBroker] = {}
    try:
        brokers = start_pair(directory, settings)
        wire(brokers, namespaces)
        yield brokers, directory
    finally:
        stop_all(brokers)
        if keep:
            print(f"data directories and logs kept in {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)


def log_excerpts(brokers: dict[str, ClusterBroker], lines: int = 40) -> str:
    return "\n".join(broker.log_excerpt(lines) for broker in brokers.values())


# ------------------------------------------------------------------------------------------ perf


def start_consume(
    broker: ClusterBroker, topic: str, messages: int, json_path: Path, args: Any, idle_timeout_s: float
) -> subprocess.Popen:
    """`magnetar perf consume` with CONSUMERS Key_Shared consumers, returned once subscribed (its later
    lines are left in its pipe, read by `finish_consume`). `args` gives consumer_client and batch_receive."""
    command = MAGNETAR + ["perf", "consume", "--service-url", broker.url, "--topic", topic, "--type", "Key_Shared"]
    command += ["--consumers", str(CONSUMERS), "--messages", str(messages), "--size", str(SIZE_BYTES)]
    command += ["--client", args.consumer_client, "--json", str(json_path), "--idle-timeout", str(idle_timeout_s)]
    if args.consumer_client == "pulsar":
        command += ["--batch-receive", str(args.batch_receive)]
    consume = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert consume.stdout is not None
    for line in consume.stdout:  # the subscription must exist before the first message is published
        print(line, end="", flush=True)
        if "subscribed" in line:
            return consume
    consume.wait()
    raise RuntimeError(f"perf consume on {broker.cluster} exited with {consume.returncode} before subscribing")


def finish_consume(consume: subprocess.Popen, quiet: bool, timeout_s: float) -> list[str]:
    """Relay (or drop) the consumer's progress lines until it exits, and return them; kill it after
    `timeout_s`."""
    assert consume.stdout is not None
    deadline = time.monotonic() + timeout_s
    lines = []
    for line in consume.stdout:
        lines.append(line)
        if not quiet:
            print(line, end="", flush=True)
        if time.monotonic() > deadline:
            break
    try:
        consume.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        consume.kill()
        consume.wait()
        raise RuntimeError(f"perf consume still running after {timeout_s:.0f} s: killed") from None
    return lines


# A progress line of perf consume: one second's receive rate and latency percentiles.
PROGRESS = re.compile(r"consume:\s+([\d,]+) msg/s .*latency p50 ([\d.]+) p99 ([\d.]+) ms")


def progress_windows(lines: list[str]) -> list[dict[str, float]]:
    """The per-second windows of perf consume's progress lines: msg/s, p50 and p99 ms."""
    windows = []
    for line in lines:
        match = PROGRESS.search(line)
        if match:
            windows.append(
                {
                    "msg_per_s": float(match.group(1).replace(",", "")),
                    "p50_ms": float(match.group(2)),
                    "p99_ms": float(match.group(3)),
                }
            )
    return windows


def produce_command(
    broker: ClusterBroker, topic: str, messages: int, batching: bool, json_path: Path, args: Any, rate: float = 0
) -> list[str]:
    """`magnetar perf produce` of `messages` 100 B messages (`args` gives keys, max_pending and client)."""
    return (
        MAGNETAR
        + ["perf", "produce", "--service-url", broker.url, "--topic", topic]
        + ["--messages", str(messages), "--size", str(SIZE_BYTES), "--keys", str(args.keys)]
        + ["--max-pending", str(args.max_pending), "--batching" if batching else "--no-batching"]
        + ["--rate", str(rate), "--client", args.client, "--json", str(json_path)]
    )


def wait_process(process: subprocess.Popen, what: str, timeout_s: float) -> int:
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise RuntimeError(f"{what} still running after {timeout_s:.0f} s: killed") from None


def read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def add_broker_setting_argument(parser: Any) -> None:
    """`--broker-setting KEY=VALUE` (repeatable): broker.conf settings for both brokers; read with `broker_settings`."""
    parser.add_argument(
        "--broker-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker.conf setting for both brokers (repeatable), e.g. replicationProducerQueueSize=10000",
    )


def broker_settings(args: Any) -> dict[str, str]:
    return dict(item.split("=", 1) for item in args.broker_setting)


def add_client_arguments(parser: Any, batch_receive_default: int) -> None:
    """The clients' flags, as e2e_throughput/e2e_latency have them."""
    parser.add_argument("--keys", type=int, default=100, help="distinct keys, round robin")
    parser.add_argument("--max-pending", type=int, default=10_000, help="producer sends in flight")
    parser.add_argument("--cases", default="batching,no-batching")
    parser.add_argument(
        "--client",
        choices=("magnetar", "pulsar"),
        default="magnetar",
        help="the producer's client (perf produce --client)",
    )
    parser.add_argument(
        "--consumer-client",
        choices=("pulsar", "magnetar"),
        default="pulsar",
        help="the consumers' client (perf consume --client)",
    )
    parser.add_argument(
        "--batch-receive",
        type=int,
        default=batch_receive_default,
        metavar="N",
        help="official consumers: up to N messages per batch_receive (or 10 ms); 0 = one receive per message",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument("--dir", default=None, help="where the temporary data directories go")
    parser.add_argument("--keep", action="store_true", help="keep the data directories and broker logs")


def write_result(name: str, result: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def create_topic(brokers: dict[str, ClusterBroker], topic: str, replicated: bool, timeout_s: float = 30) -> None:
    """Create `topic` on r1 through the admin API and, if it replicates, wait until r1's replicator to r2
    is connected: a run then measures replication going on, not the replicator's first connection."""
    path = "/admin/v2/persistent/" + topic.removeprefix("persistent://")
    admin(brokers["r1"], "PUT", path, expect=(204,))
    if not replicated:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        replicator = ((topic_stats(brokers["r1"], topic) or {}).get("replication") or {}).get("r2") or {}
        if replicator.get("connected"):
            return
        time.sleep(0.05)
    raise RuntimeError(
        f"r1's replicator of {topic} not connected to r2 in {timeout_s:.0f} s: {replicator}\n{log_excerpts(brokers)}"
    )


def replicator_failures(broker: ClusterBroker, topic: str) -> int:
    """How often the log says a replicator of `topic` failed and started again (an exception in its loop,
    not a remote that went away): each costs a reconnect and a resend of what was unconfirmed."""
    needle = f"[{topic}] Replicator to "
    return sum(1 for line in broker.log_text().splitlines() if needle in line and "failed; it starts again" in line)
