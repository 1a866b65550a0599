"""Cluster chaos with the official clients (issue 34): producers and Key_Shared consumers on six topics
spread over three brokers of a real cluster (ZooKeeper, four bookies, E/W/A = 3/3/2), through one fault
per scenario: kill -9 of a topic's owner (the Go client producing one of its topics), kill -STOP of an
owner past its session timeout then kill -CONT, kill -9 of a bookie, an admin unload of a bundle. After
the fault and a drain, every topic's log must show every receipted message delivered, per-key order of
first deliveries, one consumer per unacknowledged key (within the broker that delivered it: churn.py's
module doc), no subscription stuck past PROGRESS_S after the fault, an empty backlog; the kill -STOP
scenario also that the continued broker sent no message to any consumer (workload.py's
check_silent_after).

Why the continued broker's silence is enough for "it must not deliver or write anything after the new
owner took over". Deliveries: every consumer of its topics is still connected to it while it is stopped
(the C++ client closes a connection that left a keep-alive ping unanswered only at the next ping, 30 s
later, which the Python client cannot shorten; the test checks that all of them were still on it); the test
makes the new owner serve (a new consumer subscribes through the other brokers, once a lookup names the
new owner) before it continues the stopped one, so any MESSAGE frame that broker sends after kill -CONT
comes after the takeover, and the clients' own log lines show every frame with the broker that sent it.
The one-consumer rule alone would not see it: the stopped broker's consumers were released when it lost
the topics. Writes: a receipt for a write the new owner does not hold would be a receipted message never
delivered (no-loss); a write it does hold came before its fencing recovery, so before the takeover.

The scenarios share one cluster, each on topics of its own, and undo their fault (restart the killed
broker, start the killed bookie, continue the stopped one); each first unloads the namespace so that its
topics spread over the three brokers again. Each run's logs (every topic's delivery log, the clients' log,
the report) are in the test's tmp_path; the brokers' logs are the cluster's.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from workload import (
    NAMESPACE,
    TOPICS,
    WorkloadProcess,
    broker_address,
    bundle_range,
    spread_topics,
)

from cluster_processes import running_cluster
from magnetar.cli.local_cluster import LocalCluster
from magnetar.cli.rest import AdminClient, AdminError

SESSION_TIMEOUT_MS = 5000  # metadataStoreSessionTimeoutMillis: a broker stopped longer loses its bundles
SEEDS = (1, 2)
# After a broker's kill -9 or kill -STOP, the longest wait for a lookup to name another owner: its
# session expires after SESSION_TIMEOUT_MS and ZooKeeper notices within a tick; the rest is a busy machine.
OWNER_MOVE_S = SESSION_TIMEOUT_MS / 1000 + 20
ENSEMBLE_CHANGE = "ensemble from entry"  # the BookKeeper client's log line for a new segment


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory, brokers=3, bookies=4, session_timeout_ms=SESSION_TIMEOUT_MS) as cluster:
        yield cluster


def serving(cluster: LocalCluster, but: int | None = None) -> int:
    """A broker that runs, not `but`."""
    return next(b.index for b in cluster.brokers if b.process.running and not b.process.paused and b.index != but)


def boundaries(cluster: LocalCluster) -> list[int]:
    answer = AdminClient(cluster.http_url(serving(cluster))).get(f"/admin/v2/namespaces/{NAMESPACE}/bundles")
    return [int(bound, 16) for bound in answer["boundaries"]]


def owner_other_than(cluster: LocalCluster, topic: str, old: int) -> int | None:
    """The topic's owner by a lookup, if it is not `old`; the lookup gives a bundle nobody owns an owner."""
    try:
        owner = cluster.owner(topic)
    except (OSError, ValueError, LookupError):
        return None  # the lookup was refused meanwhile (the bundle is changing hands): ask again
    return None if owner == old else owner


def wait_for(what: str, timeout_s: float, found: Callable[[], object]) -> object:
    deadline = time.monotonic() + timeout_s
    while (answer := found()) is None or answer is False:
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout_s} s")
        time.sleep(0.1)
    return answer


def broker_log_count(cluster: LocalCluster, text: str) -> int:
    return sum(cluster.log_paths[b.name].read_text(errors="replace").count(text) for b in cluster.brokers)


class Run:
    """One scenario's workload on topics of its own, spread over the brokers."""

    def __init__(self, cluster: LocalCluster, tmp_path: Path, scenario: str, seed: int) -> None:
        self.cluster = cluster
        self.scenario = scenario
        self.seed = seed
        self.log_dir = tmp_path / "logs"
        # The bundles the earlier scenarios left where they were go to whoever takes them first.
        AdminClient(cluster.http_url(serving(cluster))).put(f"/admin/v2/namespaces/{NAMESPACE}/unload")
        self.boundaries = boundaries(cluster)
        self.topics = spread_topics(f"{scenario}-{seed}", TOPICS, self.boundaries)
        self.owners: dict[str, int] = {}
        self._load: WorkloadProcess | None = None

    def start(self, *, go_producer: bool = False, trace_frames: bool = False) -> None:
        """The workload, the Go client producing the first topic if asked; returns once every topic flows."""
        self._load = WorkloadProcess(
            self.log_dir,
            self.cluster.service_url,
            [broker.http_url for broker in self.cluster.brokers],
            self.topics,
            self.seed,
            go_producer_topics=self.topics[:1] if go_producer else (),
            trace_frames=trace_frames,
        )
        self.owners = {topic: self.cluster.owner(topic) for topic in self.topics}
        assert sorted(set(self.owners.values())) == [0, 1, 2], f"the topics are not on every broker: {self.owners}"

    @property
    def load(self) -> WorkloadProcess:
        assert self._load is not None, "not started"
        return self._load

    def owned_by(self, broker: int) -> list[str]:
        return [topic for topic, owner in self.owners.items() if owner == broker]

    def verdict(self, silent: tuple[str, int, str] | None = None) -> None:
        outcome = self.load.finish(f"{self.scenario} seed={self.seed} owners={self.owners}", silent)
        print(outcome["report"])
        assert not outcome["failed"], f"{outcome['report']}\nlogs: {self.log_dir}\nbrokers' logs: " + ", ".join(
            str(self.cluster.log_paths[b.name]) for b in self.cluster.brokers
        )

    def close(self) -> None:
        if self._load is not None:
            self._load.close()


@pytest.fixture
def run(cluster: LocalCluster, tmp_path: Path) -> Iterator[Callable[..., Run]]:
    """`run(scenario, seed, **start_options)`: a started Run, closed at the end of the test whatever happened."""
    started: list[Run] = []

    def start(scenario: str, seed: int, **options: bool) -> Run:
        each = Run(cluster, tmp_path, scenario, seed)
        started.append(each)
        each.start(**options)
        return each

    yield start
    for each in started:
        each.close()


@pytest.mark.parametrize("seed", SEEDS)
def test_kill_9_of_a_topics_owner_mid_stream(cluster: LocalCluster, run: Callable[..., Run], seed: int) -> None:
    """The Go client produces the victim's first topic; its restart later is one more change of members."""
    chaos = run("kill", seed, go_producer=True)
    first = chaos.topics[0]
    victim = chaos.owners[first]
    moved = chaos.owned_by(victim)
    chaos.load.mark("fault", f"kill -9 of broker-{victim}, owner of {moved}")
    cluster.kill_broker(victim)
    try:
        chaos.load.mark("settled", f"broker-{victim} killed")
        wait_for(f"a new owner of {first}", OWNER_MOVE_S, lambda: owner_other_than(cluster, first, victim))
        chaos.load.wait_flowing()
    finally:
        cluster.restart_broker(victim)
    chaos.load.mark("settled", f"broker-{victim} restarted")
    chaos.load.wait_flowing()
    chaos.verdict()


@pytest.mark.parametrize("seed", SEEDS)
def test_kill_stop_past_the_session_timeout_then_cont(
    cluster: LocalCluster, run: Callable[..., Run], seed: int
) -> None:
    chaos = run("stop", seed, trace_frames=True)
    victim = chaos.owners[chaos.topics[0]]
    moved = chaos.owned_by(victim)
    address = broker_address(cluster.broker_url(victim))
    others = "pulsar://" + ",".join(broker_address(b.url) for b in cluster.brokers if b.index != victim)
    chaos.load.mark("fault", f"kill -STOP of broker-{victim}, owner of {moved}")
    cluster.stop_broker(victim)
    try:
        new_owners = {
            topic: wait_for(
                f"a new owner of {topic}", OWNER_MOVE_S, lambda topic=topic: owner_other_than(cluster, topic, victim)
            )
            for topic in moved
        }
        # Its consumers cannot know; from here the new owners may give their keys to others.
        released = chaos.load.release(moved, address, f"broker-{victim}'s session expired: now {new_owners}")
        assert released == sum(len(chaos.load.brokers(topic)) for topic in moved)
        for topic in moved:
            joined = chaos.load.add(topic, "takeover", url=others)
            assert joined["subscribed"], f"{joined['identity']} could not subscribe to {topic} on its new owner"
    finally:
        try:
            continued = chaos.load.mark("settled", f"kill -CONT of broker-{victim}, its topics served by others")
        finally:
            cluster.cont_broker(victim)
    chaos.load.wait_flowing()
    chaos.verdict(silent=(address, continued, f"kill -CONT, its topics served by {new_owners}"))


@pytest.mark.parametrize("seed", SEEDS)
def test_kill_9_of_a_bookie_mid_stream(cluster: LocalCluster, run: Callable[..., Run], seed: int) -> None:
    """Three bookies of four hold each ledger: a write that loses one goes on with the fourth."""
    chaos = run("bookie", seed)
    bookie = random.Random(seed).randrange(len(cluster.bookkeeper.bookies))
    changes = broker_log_count(cluster, ENSEMBLE_CHANGE)
    chaos.load.mark("fault", f"kill -9 of bookie-{bookie}")
    cluster.kill_bookie(bookie)
    try:
        chaos.load.mark("settled", f"bookie-{bookie} killed")
        chaos.load.wait_flowing()
    finally:
        cluster.start_bookie(bookie)
    assert broker_log_count(cluster, ENSEMBLE_CHANGE) > changes, (
        f"no ledger changed its ensemble without bookie-{bookie}"
    )
    chaos.load.mark("settled", f"bookie-{bookie} started again")
    chaos.load.wait_flowing()
    chaos.verdict()


@pytest.mark.parametrize("seed", SEEDS)
def test_admin_unload_of_a_bundle_under_load(cluster: LocalCluster, run: Callable[..., Run], seed: int) -> None:
    """Asked of a broker that does not own the bundle: the 307 to its owner is part of the path."""
    chaos = run("unload", seed)
    topic = chaos.topics[0]
    bundle = bundle_range(topic, chaos.boundaries)
    owner = chaos.owners[topic]
    asked = serving(cluster, but=owner)
    chaos.load.mark(
        "fault", f"unload of bundle {bundle} (owner broker-{owner}, {chaos.owned_by(owner)}) asked of broker-{asked}"
    )
    try:
        AdminClient(cluster.http_url(asked)).put(f"/admin/v2/namespaces/{NAMESPACE}/{bundle}/unload")
    except AdminError as error:
        pytest.fail(f"the unload of {bundle} failed: {error}")
    chaos.load.mark("settled", f"bundle {bundle} unloaded")
    chaos.load.wait_flowing()
    chaos.verdict()
