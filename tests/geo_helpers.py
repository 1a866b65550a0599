"""What the geo-replication tests share (tests/replication, and tests/compat's with the Java client):
clusters wired together over the admin API, keyed publishing with the official client, collecting a
topic's messages in one cluster, and checks that say what went wrong.

Black-box only: `pulsar-client` and HTTP, as an operator and a user have them. Every wait is bounded
(`WAIT_S`, `MAGNETAR_REPL_WAIT_S` to change it); a timeout fails with what was last seen (counts, the
first missing or duplicated messages, the stats JSON).

Payloads are `<stream>:<seq>` (seq zero-padded): a stream is one producer's sequence of sends, so
"per-origin order" means seq increasing per stream in what a consumer receives.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import pulsar

# Bound of every wait for something to arrive or show; settable for slow machines.
WAIT_S = float(os.environ.get("MAGNETAR_REPL_WAIT_S", "20"))
# After the expected count arrived, keep receiving this long to catch duplicates and strays.
LINGER_S = 1.0
TENANT = "geo"
INFINITE_RETENTION = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
EVENT_TIME_BASE_MS = 1_700_000_000_000
# Properties a broker may add to replicated messages (Pulsar 4.0.4+: __MSG_PROP_REPL_SOURCE_POSITION).
BROKER_PROPERTY_PREFIX = "__"


# ------------------------------------------------------------------------------------------ HTTP


def admin(broker: Any, method: str, path: str, body: Any = None, expect: Iterable[int] = (200, 204)) -> httpx.Response:
    """One admin call on `broker` (`path` below its http_url); fails with the answer if the status is unexpected."""
    url = f"{broker.http_url}{path}"
    kwargs: dict[str, Any] = {"timeout": 15}
    if body is not None:
        kwargs["json"] = body
    response = httpx.request(method, url, **kwargs)
    assert response.status_code in tuple(expect), (
        f"{method} {url} {json.dumps(body) if body is not None else ''} -> {response.status_code}: "
        f"{response.text[:2000]}"
    )
    return response


def topic_path(topic: str) -> str:
    """`persistent://geo/ns/t` -> `/admin/v2/persistent/geo/ns/t`."""
    assert topic.startswith("persistent://"), topic
    return "/admin/v2/persistent/" + topic[len("persistent://") :]


def topic_stats(broker: Any, topic: str) -> dict[str, Any] | None:
    """The topic's stats in that cluster, or None while the topic does not exist there."""
    response = httpx.get(f"{broker.http_url}{topic_path(topic)}/stats", timeout=15)
    if response.status_code == 404:
        return None
    assert response.status_code == 200, f"stats of {topic}: {response.status_code} {response.text[:2000]}"
    return response.json()


def replication_stats(broker: Any, topic: str) -> dict[str, Any]:
    """`stats.replication` (remote cluster -> ReplicatorStats); {} when absent."""
    stats = topic_stats(broker, topic) or {}
    return stats.get("replication") or {}


def publisher_names(broker: Any, topic: str) -> list[str]:
    stats = topic_stats(broker, topic) or {}
    return [p.get("producerName", "") for p in stats.get("publishers", [])]


def metric_samples(broker: Any, name: str) -> list[tuple[dict[str, str], float]]:
    """Samples of one Prometheus family in the broker's /metrics: (labels, value)."""
    response = httpx.get(f"{broker.http_url}/metrics", timeout=15)
    assert response.status_code == 200, f"/metrics: {response.status_code} {response.text[:500]}"
    samples = []
    pattern = re.compile(r"^" + re.escape(name) + r"\{([^}]*)\}\s+(\S+)", re.MULTILINE)
    for labels_text, value in pattern.findall(response.text):
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels_text))
        samples.append((labels, float(value)))
    return samples


def dump(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True, default=str)[:6000]


def wait_until(
    check: Callable[[], Any],
    what: str,
    details: Callable[[], str] | None = None,
    timeout_s: float = WAIT_S,
    interval_s: float = 0.1,
) -> Any:
    """Poll `check` until it returns something truthy; after `timeout_s` fail with `what` and `details()`."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            extra = details() if details else ""
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting until {what}\n{extra}")
        time.sleep(interval_s)


# ------------------------------------------------------------------------------- the clusters


class Geo:
    """Broker processes named by their cluster (`r1`, `r2`, ...), wired into one replication mesh."""

    def __init__(self, brokers: dict[str, Any]) -> None:
        self.brokers = brokers

    def __getitem__(self, cluster: str) -> Any:
        return self.brokers[cluster]

    def connect(self) -> None:
        """Register every cluster, with its URLs, on every broker (each broker has its own metadata)."""
        for broker in self.brokers.values():
            for cluster, other in self.brokers.items():
                body = {"serviceUrl": other.http_url, "brokerServiceUrl": other.url}
                response = admin(broker, "PUT", f"/admin/v2/clusters/{cluster}", body, expect=(200, 409))
                if response.status_code == 409:  # the broker's own cluster exists from its first start
                    admin(broker, "POST", f"/admin/v2/clusters/{cluster}", body, expect=(200,))
            known = admin(broker, "GET", "/admin/v2/clusters").json()
            assert set(self.brokers) <= set(known), f"clusters on {broker.url}: {known}"
            for cluster, other in self.brokers.items():
                data = admin(broker, "GET", f"/admin/v2/clusters/{cluster}").json()
                assert data.get("brokerServiceUrl") == other.url, f"cluster {cluster} on {broker.url}: {data}"

    def create_tenant(self, tenant: str = TENANT) -> None:
        body = {"adminRoles": [], "allowedClusters": sorted(self.brokers)}
        for broker in self.brokers.values():
            admin(broker, "PUT", f"/admin/v2/tenants/{tenant}", body, expect=(204,))

    def create_namespace(self, namespace: str, clusters: list[str]) -> None:
        """`geo/<namespace>` replicating to `clusters`, created on each of those clusters. Retention is
        infinite, so that a new subscription from Earliest sees every message a topic ever had, also
        after a restart trimmed what the earlier subscriptions acknowledged."""
        body = {"replication_clusters": clusters, "retention_policies": INFINITE_RETENTION}
        for cluster in clusters:
            broker = self.brokers[cluster]
            admin(broker, "PUT", f"/admin/v2/namespaces/{TENANT}/{namespace}", body, expect=(204,))
            got = admin(broker, "GET", f"/admin/v2/namespaces/{TENANT}/{namespace}/replication").json()
            assert sorted(got) == sorted(clusters), f"replication of {TENANT}/{namespace} on {cluster}: {got}"

    def set_namespace_replication(self, cluster: str, namespace: str, clusters: list[str]) -> None:
        admin(
            self.brokers[cluster],
            "POST",
            f"/admin/v2/namespaces/{TENANT}/{namespace}/replication",
            clusters,
            expect=(200,),
        )

    def log_tails(self, lines: int = 40) -> str:
        parts = []
        for cluster, broker in self.brokers.items():
            try:
                text = broker.output().splitlines()[-lines:]
            except OSError as error:
                text = [f"<{error}>"]
            parts.append(f"--- broker {cluster} ({broker.url}, log {broker.log_path}) ---\n" + "\n".join(text))
        return "\n".join(parts)


def wire(brokers: dict[str, Any], namespaces: dict[str, list[str]]) -> Geo:
    """`brokers` (cluster name -> broker process) wired into one mesh: every cluster registered on every
    broker, tenant `geo` allowed on all, and each namespace `geo/<ns>` replicating to its clusters."""
    geo = Geo(brokers)
    geo.connect()
    geo.create_tenant()
    for namespace, clusters in namespaces.items():
        geo.create_namespace(namespace, clusters)
    return geo


def new_topic(namespace: str, prefix: str) -> str:
    return f"persistent://{TENANT}/{namespace}/{prefix}-{uuid.uuid4().hex[:8]}"


def start_again(broker: Any) -> None:
    """Start a stopped (or killed) broker on its ports and data: `restart` of a process that already exited."""
    broker.restart()


# ---------------------------------------------------------------------------------- publishing


@dataclass(frozen=True)
class Sent:
    payload: str
    key: str
    ordering_key: str
    properties: dict[str, str]
    event_timestamp: int
    partition: int


def payload_of(stream: str, seq: int) -> str:
    return f"{stream}:{seq:05d}"


def message(stream: str, seq: int, keys: int = 7) -> tuple[Sent, dict[str, Any]]:
    """Message `seq` of `stream`: key, ordering key, properties and event time derived from it; returns
    what is sent and the keyword arguments of `Producer.send`."""
    sent = Sent(
        payload=payload_of(stream, seq),
        key=f"k{seq % keys}",
        ordering_key=f"ok-{seq % keys}",
        properties={"stream": stream, "seq": str(seq)},
        event_timestamp=EVENT_TIME_BASE_MS + seq,
        partition=-1,
    )
    kwargs = {
        "properties": sent.properties,
        "partition_key": sent.key,
        "ordering_key": sent.ordering_key,
        "event_timestamp": sent.event_timestamp,
    }
    return sent, kwargs


def publish(
    producer: pulsar.Producer,
    stream: str,
    count: int,
    *,
    start: int = 0,
    keys: int = 7,
    send_kwargs: Callable[[int], dict[str, Any]] | None = None,
) -> list[Sent]:
    """`count` keyed messages with properties, ordering key and event time, sent asynchronously (so a
    batching producer makes batches); returns them once the broker acknowledged every one."""
    lock = threading.Lock()
    results: dict[int, tuple[Any, Any]] = {}
    sent: list[tuple[int, Sent]] = []

    def callback_for(seq: int) -> Callable[[Any, Any], None]:
        def done(result: Any, message_id: Any) -> None:
            with lock:
                results[seq] = (result, message_id)

        return done

    for seq in range(start, start + count):
        record, kwargs = message(stream, seq, keys)
        kwargs.update(send_kwargs(seq) if send_kwargs else {})
        producer.send_async(record.payload.encode(), callback_for(seq), **kwargs)
        sent.append((seq, record))
    producer.flush()
    wait_until(
        lambda: len(results) == count,
        f"the broker acknowledged {count} sends of {stream}",
        lambda: f"acknowledged {len(results)}",
    )
    failed = {seq: str(result) for seq, (result, _) in results.items() if result != pulsar.Result.Ok}
    assert not failed, f"sends of {stream} failed: {dict(list(failed.items())[:10])}"
    return [replace(record, partition=results[seq][1].partition()) for seq, record in sent]


# --------------------------------------------------------------------------------- collecting


@dataclass(frozen=True)
class Received:
    payload: str
    partition_key: str
    ordering_key: str
    properties: dict[str, str]
    event_timestamp: int
    publish_timestamp: int
    producer_name: str
    topic_name: str
    ledger_id: int
    entry_id: int
    batch_index: int
    partition: int

    @property
    def stream(self) -> str:
        return self.payload.rsplit(":", 1)[0]

    @property
    def seq(self) -> int:
        return int(self.payload.rsplit(":", 1)[1])

    @property
    def entry(self) -> tuple[str, int, int]:
        """The stored entry this message came in (a batch's messages share it)."""
        return (self.topic_name, self.ledger_id, self.entry_id)


def _received(message: pulsar.Message) -> Received:
    mid = message.message_id()
    ordering_key = message.ordering_key()
    return Received(
        payload=message.data().decode(),
        partition_key=message.partition_key(),
        ordering_key=ordering_key.decode() if isinstance(ordering_key, bytes) else ordering_key,
        properties=dict(message.properties()),
        event_timestamp=message.event_timestamp(),
        publish_timestamp=message.publish_timestamp(),
        producer_name=message.producer_name(),
        topic_name=message.topic_name(),
        ledger_id=mid.ledger_id(),
        entry_id=mid.entry_id(),
        batch_index=mid.batch_index(),
        partition=mid.partition(),
    )


@dataclass
class Collector:
    """A durable subscription from Earliest on one cluster's topic; receives and acknowledges."""

    client: pulsar.Client
    topic: str
    cluster: str
    subscription: str = field(default_factory=lambda: f"check-{uuid.uuid4().hex[:8]}")
    records: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.consumer = self.client.subscribe(
            self.topic,
            self.subscription,
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=1000,
        )

    def _receive_one(self, timeout_ms: int) -> bool:
        try:
            message = self.consumer.receive(timeout_millis=timeout_ms)
        except pulsar.Timeout:
            return False
        self.records.append(_received(message))
        self.consumer.acknowledge(message)
        return True

    def until(self, count: int, timeout_s: float = WAIT_S, linger_s: float = LINGER_S) -> list[Received]:
        """Receive until at least `count` messages in all (or the timeout), then `linger_s` more of quiet."""
        deadline = time.monotonic() + timeout_s
        while len(self.records) < count and time.monotonic() < deadline:
            self._receive_one(200)
        self.linger(linger_s)
        return self.records

    def linger(self, quiet_s: float = LINGER_S) -> list[Received]:
        """Receive until nothing came for `quiet_s` (at most 10 quiet periods in all)."""
        deadline = time.monotonic() + 10 * quiet_s
        quiet_until = time.monotonic() + quiet_s
        while time.monotonic() < min(quiet_until, deadline):
            if self._receive_one(100):
                quiet_until = time.monotonic() + quiet_s
        return self.records

    def close(self) -> None:
        try:
            self.consumer.close()
        except Exception:  # noqa: BLE001 - closing after a broker went away is best effort
            pass


def collect(
    client: pulsar.Client, topic: str, cluster: str, count: int, timeout_s: float = WAIT_S, linger_s: float = LINGER_S
) -> list[Received]:
    """Every message of `topic` in one cluster: a new subscription at Earliest, until `count` (or the
    timeout), then `linger_s` more to catch duplicates."""
    collector = Collector(client, topic, cluster)
    try:
        return list(collector.until(count, timeout_s, linger_s))
    finally:
        collector.close()


# ------------------------------------------------------------------------------------- checks


def _first(items: Iterable[Any], n: int = 10) -> list[Any]:
    return sorted(items)[:n]


def check_exactly_once(received: list[Received], expected: Iterable[str], where: str) -> None:
    """Every expected payload exactly once, nothing else."""
    expected = list(expected)
    counts = Counter(r.payload for r in received)
    wanted = set(expected)
    missing = [p for p in expected if p not in counts]
    duplicates = {p: n for p, n in counts.items() if n > 1}
    unexpected = [p for p in counts if p not in wanted]
    if missing or duplicates or unexpected:
        by_stream = Counter(r.stream for r in received)
        raise AssertionError(
            f"{where}: received {len(received)} messages ({len(counts)} distinct), expected {len(wanted)} "
            f"exactly once; per stream received {dict(by_stream)}\n"
            f"  missing {len(missing)}: {_first(missing)}\n"
            f"  duplicated {len(duplicates)}: {dict(sorted(duplicates.items())[:10])}\n"
            f"  unexpected {len(unexpected)}: {_first(unexpected)}"
        )


def check_order(received: list[Received], where: str, per_key: bool = False) -> None:
    """Per stream (per stream and key with `per_key`, for partitioned topics) seq only increases."""
    last: dict[tuple[str, str], Received] = {}
    for index, record in enumerate(received):
        group = (record.stream, record.partition_key if per_key else "")
        before = last.get(group)
        if before is not None and record.seq <= before.seq:
            around = [r.payload for r in received[max(0, index - 5) : index + 3]]
            raise AssertionError(
                f"{where}: out of order in {group}: {record.payload} (#{index}) after {before.payload}; "
                f"around it: {around}"
            )
        last[group] = record


def check_metadata(received: list[Received], origin: dict[str, Received], where: str) -> None:
    """Replicated messages keep the origin's key, ordering key, properties, event time, publish time and
    producer name (the replicator forwards the entry's metadata, adding only replicated_from)."""
    problems = []
    for record in received:
        source = origin.get(record.payload)
        if source is None:
            continue
        fields = ("partition_key", "ordering_key", "event_timestamp", "publish_timestamp", "producer_name")
        for name in fields:
            if getattr(record, name) != getattr(source, name):
                problems.append(
                    f"{record.payload}: {name} {getattr(record, name)!r} != origin's {getattr(source, name)!r}"
                )
        kept = {k: v for k, v in record.properties.items() if not k.startswith(BROKER_PROPERTY_PREFIX)}
        if kept != source.properties:
            problems.append(f"{record.payload}: properties {record.properties} != origin's {source.properties}")
    assert not problems, f"{where}: {len(problems)} metadata differences, first: " + "\n  ".join(problems[:10])


def check_sent_metadata(received: list[Received], sent: list[Sent], where: str) -> None:
    """What the producer set arrives as it was set."""
    by_payload = {s.payload: s for s in sent}
    problems = []
    for record in received:
        source = by_payload.get(record.payload)
        if source is None:
            continue
        kept = {k: v for k, v in record.properties.items() if not k.startswith(BROKER_PROPERTY_PREFIX)}
        expected = (source.key, source.ordering_key, source.properties, source.event_timestamp)
        actual = (record.partition_key, record.ordering_key, kept, record.event_timestamp)
        if actual != expected:
            problems.append(
                f"{record.payload}: (key, ordering key, properties, event time) {actual} != sent {expected}"
            )
    assert not problems, f"{where}: {len(problems)} messages differ from what was sent, first: " + "\n  ".join(
        problems[:10]
    )


def entry_groups(received: list[Received], stream: str | None = None) -> set[tuple[str, ...]]:
    """The messages grouped by the entry they came in (a batch is one group), as payload tuples."""
    groups: dict[tuple[str, int, int], list[Received]] = defaultdict(list)
    for record in received:
        if stream is None or record.stream == stream:
            groups[record.entry].append(record)
    return {tuple(r.payload for r in sorted(members, key=lambda r: r.batch_index)) for members in groups.values()}


def replication_details(geo: Geo, topic: str) -> Callable[[], str]:
    """For failure messages: every cluster's stats of the topic (replication, publishers, subscriptions)."""

    def details() -> str:
        parts = []
        for cluster, broker in geo.brokers.items():
            try:
                stats = topic_stats(broker, topic)
            except (httpx.HTTPError, AssertionError) as error:
                stats = f"<{error}>"
            if isinstance(stats, dict):
                stats = {k: stats.get(k) for k in ("replication", "publishers", "subscriptions", "msgInCounter")}
            parts.append(f"{cluster} stats of {topic}: {dump(stats)}")
        return "\n".join(parts)

    return details


@contextmanager
def explained(details: Callable[[], str]) -> Iterator[None]:
    """Append `details()` (stats of every cluster, say) to an assertion failing inside the block."""
    try:
        yield
    except AssertionError as error:
        raise AssertionError(f"{error}\n{details()}") from None
