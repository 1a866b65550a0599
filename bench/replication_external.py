"""Clusters the replication benchmarks did not start: `--external r1=pulsar://h:p,http://h:p` (and r2), two
clusters already running, such as two Apache Pulsar standalones started by hand, measured by the same
code and clients as magnetar's.

The benchmark wires them as it wires its own (clusters registered, tenant `bench`, its namespaces) and
never stops them. A broker's CPU is read from the process listening on its broker port (`ss -ltnp`): run
the benchmark as a user that may see that process. A cluster's log is its own, so the replicator
failures that magnetar's log would show are not counted.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).parent))

from replication_common import CLUSTERS, running_pair, wire

_PID = re.compile(r"pid=(\d+)")


class ExternalBroker:
    """A running cluster's broker, by its two URLs."""

    def __init__(self, cluster: str, url: str, http_url: str) -> None:
        self.cluster, self.url, self.http_url = cluster, url, http_url.rstrip("/")
        port = urlsplit(url).port or 6650
        pid = _listening_pid(port)
        if pid is None:
            raise SystemExit(f"--external {cluster}: no process of ours seen listening on port {port} (ss -ltnp)")
        self.pid = pid

    def log_text(self, offset: int = 0) -> str:
        return ""

    def log_excerpt(self, lines: int = 40) -> str:
        return f"--- {self.cluster} ({self.url}): external, see its own log"


def _listening_pid(port: int) -> int | None:
    try:
        output = subprocess.run(
            ["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True, check=False
        ).stdout
    except FileNotFoundError:
        return None
    match = _PID.search(output)
    return int(match.group(1)) if match else None


def add_external_argument(parser: Any) -> None:
    parser.add_argument(
        "--external",
        action="append",
        default=[],
        metavar="CLUSTER=BROKER_URL,HTTP_URL",
        help="measure clusters already running instead of starting magnetar (give r1 and r2)",
    )


def external_brokers(specs: list[str]) -> dict[str, ExternalBroker]:
    brokers = {}
    for spec in specs:
        cluster, _, urls = spec.partition("=")
        url, _, http_url = urls.partition(",")
        if cluster not in CLUSTERS or not url.startswith("pulsar://") or not http_url.startswith("http"):
            raise SystemExit(f"--external {spec!r}: expected r1=pulsar://host:port,http://host:port (or r2=...)")
        brokers[cluster] = ExternalBroker(cluster, url, http_url)
    if sorted(brokers) != sorted(CLUSTERS):
        raise SystemExit(f"--external: give both {' and '.join(CLUSTERS)}, got {sorted(brokers)}")
    return brokers


@contextmanager
def clusters(
    args: Any, namespaces: dict[str, list[str]], settings: dict[str, str]
) -> Iterator[tuple[dict[str, Any], Path]]:
    """r1 and r2: the `--external` ones, wired and left running, or magnetar's, started with `settings`
    (`running_pair`); with a directory for the runs' files."""
    if not args.external:
        with running_pair(namespaces, args.dir, args.keep, settings) as pair:
            yield pair
        return
    if settings:
        raise SystemExit("--broker-setting applies to the brokers the benchmark starts, not to --external ones")
    brokers = external_brokers(args.external)
    wire(brokers, namespaces)  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory(prefix="magnetar-bench-repl-", dir=args.dir) as directory:
        yield brokers, Path(directory)
