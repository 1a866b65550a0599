"""Snapshots of replicated subscriptions as pure state: Pulsar's ReplicatedSubscriptionsSnapshotBuilderTest and
ReplicatedSubscriptionSnapshotCacheTest with their numbers, the controller's rules for starting a snapshot
(ReplicatedSubscriptionsController.startNewSnapshot), the responder, and properties against small reference models."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.positions import Position
from magnetar.protocol import markers
from magnetar.protocol.pulsar_markers_pb2 import (
    ClusterMessageId,
    MarkersMessageIdData,
    ReplicatedSubscriptionsSnapshotRequest,
    ReplicatedSubscriptionsSnapshotResponse,
    ReplicatedSubscriptionsUpdate,
)
from magnetar.replication.snapshots import (
    CachedSnapshot,
    ReplicatedSubscriptionSnapshotCache,
    SnapshotBuilder,
    SnapshotController,
    cached_snapshot,
    respond_to_request,
    update_target,
)

TIMEOUT_MS = 3000  # the builder tests' replicatedSubscriptionsSnapshotTimeoutSeconds = 3


def response(snapshot_id: str, cluster: str, ledger: int, entry: int) -> ReplicatedSubscriptionsSnapshotResponse:
    return ReplicatedSubscriptionsSnapshotResponse(
        snapshot_id=snapshot_id,
        cluster=ClusterMessageId(cluster=cluster, message_id=MarkersMessageIdData(ledger_id=ledger, entry_id=entry)),
    )


def parsed(entry: bytes | None):
    assert entry is not None
    marker = markers.parse_marker(entry)
    assert marker is not None
    return marker


def clusters_of(snapshot) -> list[tuple[str, Position]]:
    return [(c.cluster, markers.position_of(c.message_id)) for c in snapshot.clusters]


# ---------------------------------------------------------------- ReplicatedSubscriptionsSnapshotBuilderTest


def test_build_snapshot_with_2_clusters() -> None:
    builder = SnapshotBuilder("snapshot-1", "a", ["b"], 0, TIMEOUT_MS)
    request = parsed(builder.request())
    assert request.marker_type == markers.SNAPSHOT_REQUEST
    assert request.body.source_cluster == "a"
    snapshot = parsed(builder.response_received(Position(1, 1), response("snapshot-1", "b", 11, 11), 0))
    assert snapshot.marker_type == markers.SNAPSHOT
    assert clusters_of(snapshot.body) == [("b", (11, 11))]
    assert markers.position_of(snapshot.body.local_message_id) == (1, 1)
    assert list(snapshot.metadata.replicate_to) == ["a"]


def test_build_snapshot_with_3_clusters() -> None:
    builder = SnapshotBuilder("snapshot-1", "a", ["b", "c"], 0, TIMEOUT_MS)
    assert parsed(builder.request()).body.source_cluster == "a"
    assert builder.response_received(Position(1, 1), response("snapshot-1", "b", 11, 11), 0) is None
    second = parsed(builder.response_received(Position(2, 2), response("snapshot-1", "c", 22, 22), 0))
    # Two remotes: a second round.
    assert second.marker_type == markers.SNAPSHOT_REQUEST
    assert (second.body.snapshot_id, second.body.source_cluster) == ("snapshot-1", "a")
    assert builder.response_received(Position(3, 3), response("snapshot-1", "b", 33, 33), 0) is None
    snapshot = parsed(builder.response_received(Position(4, 4), response("snapshot-1", "c", 44, 44), 0))
    assert snapshot.marker_type == markers.SNAPSHOT
    assert clusters_of(snapshot.body) == [("b", (11, 11)), ("c", (22, 22))]
    assert markers.position_of(snapshot.body.local_message_id) == (4, 4)


def test_build_timeout() -> None:
    builder = SnapshotBuilder("snapshot-1", "a", ["b"], 0, TIMEOUT_MS)
    assert not builder.timed_out(0)
    assert not builder.timed_out(2000)
    assert builder.timed_out(5000)
    # Pulsar's `start + timeout < now`: not at the boundary itself.
    assert not builder.timed_out(3000)
    assert builder.timed_out(3001)


def test_the_snapshot_names_where_its_first_request_was_written() -> None:
    builder = SnapshotBuilder("s", "a", ["b", "c"], 0, TIMEOUT_MS)
    builder.request_written(Position(1, 0))
    builder.response_received(Position(1, 3), response("s", "b", 11, 11), 0)
    builder.response_received(Position(1, 4), response("s", "c", 22, 22), 0)
    builder.request_written(Position(1, 5))  # the second round's
    builder.response_received(Position(1, 8), response("s", "b", 33, 33), 0)
    snapshot = parsed(builder.response_received(Position(1, 9), response("s", "c", 44, 44), 0))
    assert markers.position_of(snapshot.body.request_message_id) == (1, 0)
    assert cached_snapshot(snapshot.body) == CachedSnapshot(
        "s", Position(1, 9), (("b", Position(11, 11)), ("c", Position(22, 22))), Position(1, 0)
    )


def test_a_failed_snapshot_write_lets_the_next_response_write_it_again() -> None:
    """Pulsar #26119: complete only once the SNAPSHOT marker is stored."""
    builder = SnapshotBuilder("s", "a", ["b"], 0, TIMEOUT_MS)
    assert builder.response_received(Position(1, 1), response("s", "b", 11, 11), 0) is not None
    assert builder.response_received(Position(1, 2), response("s", "b", 12, 12), 0) is None
    builder.snapshot_write_failed()
    again = parsed(builder.response_received(Position(1, 3), response("s", "b", 13, 13), 0))
    assert clusters_of(again.body) == [("b", (11, 11))]
    assert markers.position_of(again.body.local_message_id) == (1, 3)


def test_a_response_from_a_cluster_the_snapshot_did_not_ask_is_ignored() -> None:
    builder = SnapshotBuilder("s", "a", ["b"], 0, TIMEOUT_MS)
    assert builder.response_received(Position(1, 1), response("s", "z", 1, 1), 0) is None
    assert builder.missing == {"b"}


@given(st.integers(1, 4), st.data())
def test_builder_completes_exactly_when_every_remote_answered_every_round(remotes: int, data: st.DataObject) -> None:
    """Against a reference model: any order of answers, duplicates included."""
    names = [f"r{i}" for i in range(remotes)]
    builder = SnapshotBuilder("s", "local", names, 0, TIMEOUT_MS)
    rounds = 2 if remotes > 1 else 1
    answered: set[str] = set()
    round_ = 1
    first: dict[str, Position] = {}
    answers = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=4 * remotes))
    for step, cluster in enumerate(answers, start=1):
        at = Position(1, step)
        remote_position = Position(100 + step, step)
        out = builder.response_received(at, response("s", cluster, *remote_position), 0)
        if round_ > rounds:
            assert out is None  # the SNAPSHOT is being written
            continue
        if round_ == 1:
            first.setdefault(cluster, remote_position)
        answered.add(cluster)
        if answered != set(names):
            assert out is None
            continue
        marker = parsed(out)
        if round_ < rounds:
            assert marker.marker_type == markers.SNAPSHOT_REQUEST
        else:
            assert marker.marker_type == markers.SNAPSHOT
            assert dict(clusters_of(marker.body)) == first
            assert markers.position_of(marker.body.local_message_id) == at
        round_ += 1
        answered = set()


# ------------------------------------------------------------------------------------- the controller


def controller() -> SnapshotController:
    ids = (f"snapshot-{n}" for n in itertools.count(1))
    return SnapshotController("a", TIMEOUT_MS, lambda: next(ids))


def test_no_snapshot_before_any_data() -> None:
    """testReplicationSnapshotStopWhenNoTraffic: nothing published, no marker."""
    assert controller().tick(1000, None, {"b": True}) is None


def test_a_tick_with_data_and_every_replicator_connected_starts_a_snapshot() -> None:
    control = controller()
    builder = control.tick(1000, 900, {"c": True, "b": True})
    assert builder is not None and builder.snapshot_id == "snapshot-1"
    assert builder.remote_clusters == {"b", "c"}
    assert parsed(builder.request()).body.source_cluster == "a"
    assert list(control.pending) == ["snapshot-1"]
    assert control.started_count == 1


def test_no_snapshot_while_a_replicator_is_disconnected_or_none_exists() -> None:
    control = controller()
    assert control.tick(1000, 900, {"b": True, "c": False}) is None
    assert control.tick(1000, 900, {}) is None


def test_a_peer_that_never_answers_gets_one_request_per_timeout() -> None:
    """Pulsar #23839 (testReplicatedSubscriptionOneWay): 100 ms ticks, 3 s timeout."""
    control = controller()
    started = [t for t in range(0, 7000, 100) if control.tick(t, 0, {"b": True}) is not None]
    assert started == [0, 3100, 6200]
    assert control.timed_out_count == 2
    assert len(control.pending) == 1


def test_snapshots_stop_without_new_data_and_resume_with_it() -> None:
    control = controller()
    builder = control.tick(1000, 500, {"b": True})
    assert builder is not None
    out = control.response_received(Position(3, 1), response(builder.snapshot_id, "b", 7, 7), 1200)
    assert parsed(out).marker_type == markers.SNAPSHOT
    assert control.snapshot_written(builder.snapshot_id, 1250) == 250
    assert (control.last_completed_snapshot_id, control.last_completed_start_ms) == ("snapshot-1", 1000)
    assert control.completed_count == 1 and not control.pending
    # The last data came before the completed snapshot started: nothing new to snapshot.
    assert control.tick(2000, 500, {"b": True}) is None
    assert control.tick(3000, 999, {"b": True}) is None
    # Data stored since then (the same millisecond counts, as in Pulsar).
    again = control.tick(4000, 1000, {"b": True})
    assert again is not None and again.snapshot_id == "snapshot-2"


def test_snapshots_overlap_once_one_completed() -> None:
    control = controller()
    first = control.tick(1000, 500, {"b": True})
    assert first is not None
    control.response_received(Position(3, 1), response(first.snapshot_id, "b", 7, 7), 1100)
    control.snapshot_written(first.snapshot_id, 1100)
    second = control.tick(2000, 1500, {"b": True})
    third = control.tick(3000, 2500, {"b": True})
    assert second is not None and third is not None
    assert sorted(control.pending) == ["snapshot-2", "snapshot-3"]


def test_late_and_foreign_responses_are_ignored() -> None:
    control = controller()
    builder = control.tick(0, 0, {"b": True})
    assert builder is not None
    assert control.response_received(Position(1, 1), response("another-broker's", "b", 1, 1), 10) is None
    control.tick(TIMEOUT_MS + 1, 0, {"b": False})  # times it out
    assert control.timed_out_count == 1
    assert control.response_received(Position(1, 2), response(builder.snapshot_id, "b", 1, 1), TIMEOUT_MS + 2) is None
    assert control.snapshot_written(builder.snapshot_id, TIMEOUT_MS + 3) is None
    assert control.completed_count == 0


def test_a_failed_snapshot_write_keeps_the_snapshot_pending() -> None:
    control = controller()
    builder = control.tick(0, 0, {"b": True})
    assert builder is not None
    assert control.response_received(Position(1, 1), response(builder.snapshot_id, "b", 5, 5), 10) is not None
    control.snapshot_write_failed(builder.snapshot_id)
    assert list(control.pending) == [builder.snapshot_id]
    assert control.response_received(Position(1, 2), response(builder.snapshot_id, "b", 6, 6), 20) is not None


def test_controller_rejects_a_snapshot_without_remotes() -> None:
    with pytest.raises(ValueError):
        SnapshotBuilder("s", "a", [], 0, TIMEOUT_MS)


# ------------------------------------------------------------------------------ responder and updates


def test_a_cluster_answers_with_the_position_of_the_request_itself() -> None:
    request = ReplicatedSubscriptionsSnapshotRequest(snapshot_id="sid", source_cluster="a")
    answer = parsed(respond_to_request(request, Position(8, 3), "b", 77))
    assert answer.marker_type == markers.SNAPSHOT_RESPONSE
    assert list(answer.metadata.replicate_to) == ["a"]
    assert answer.metadata.publish_time == 77
    assert answer.body.snapshot_id == "sid"
    assert answer.body.cluster.cluster == "b"
    assert markers.position_of(answer.body.cluster.message_id) == (8, 3)


def test_a_request_without_a_requester_or_from_this_cluster_gets_no_answer() -> None:
    assert respond_to_request(ReplicatedSubscriptionsSnapshotRequest(snapshot_id="sid"), Position(1, 1), "b", 0) is None
    own = ReplicatedSubscriptionsSnapshotRequest(snapshot_id="sid", source_cluster="b")
    assert respond_to_request(own, Position(1, 1), "b", 0) is None


def test_an_update_moves_the_local_subscription_to_its_own_clusters_position() -> None:
    entry = markers.subscription_update("sub", {"b": Position(11, 11), "c": Position(22, 22)}, 0)
    update = parsed(entry).body
    assert isinstance(update, ReplicatedSubscriptionsUpdate)
    assert update_target(update, "b") == (11, 11)
    assert update_target(update, "c") == (22, 22)
    assert update_target(update, "d") is None


# --------------------------------------------------------------- ReplicatedSubscriptionSnapshotCacheTest


def snap(ledger: int, entry: int) -> CachedSnapshot:
    return CachedSnapshot(f"snapshot-{ledger}", Position(ledger, entry), (), None)


def test_snapshot_cache() -> None:
    cache = ReplicatedSubscriptionSnapshotCache(10)
    assert cache.advanced_mark_delete_position(Position(0, 0)) is None
    assert cache.advanced_mark_delete_position(Position(100, 0)) is None
    for ledger in (1, 2, 5, 7):
        cache.add_new_snapshot(snap(ledger, ledger))
    assert cache.advanced_mark_delete_position(Position(0, 0)) is None
    assert cache.advanced_mark_delete_position(Position(1, 0)) is None
    found = cache.advanced_mark_delete_position(Position(1, 1))
    assert found is not None and found.snapshot_id == "snapshot-1"
    found = cache.advanced_mark_delete_position(Position(5, 6))
    assert found is not None and found.snapshot_id == "snapshot-5"
    # Snapshots should have been now removed
    assert cache.advanced_mark_delete_position(Position(2, 2)) is None
    assert cache.advanced_mark_delete_position(Position(5, 5)) is None
    assert [s.snapshot_id for s in cache.snapshots()] == ["snapshot-7"]


def test_snapshot_cache_pruning() -> None:
    cache = ReplicatedSubscriptionSnapshotCache(3)
    for ledger in (1, 2, 3, 4):
        cache.add_new_snapshot(snap(ledger, ledger))
    # Snapshot-1 was already pruned
    assert cache.advanced_mark_delete_position(Position(1, 1)) is None
    found = cache.advanced_mark_delete_position(Position(2, 2))
    assert found is not None and found.snapshot_id == "snapshot-2"
    found = cache.advanced_mark_delete_position(Position(5, 5))
    assert found is not None and found.snapshot_id == "snapshot-4"


def test_the_default_cache_holds_ten_and_the_minimum_is_one() -> None:
    cache = ReplicatedSubscriptionSnapshotCache()
    for entry in range(15):
        cache.add_new_snapshot(snap(1, entry))
    assert [s.position for s in cache.snapshots()] == [Position(1, e) for e in range(5, 15)]
    with pytest.raises(ValueError):
        ReplicatedSubscriptionSnapshotCache(0)


_position = st.builds(Position, st.integers(0, 4), st.integers(0, 6))


@given(st.integers(1, 5), st.lists(st.tuples(st.booleans(), _position), max_size=40))
def test_cache_matches_a_reference_model(max_cached: int, operations: list[tuple[bool, Position]]) -> None:
    """The newest `max_cached` by position are kept (one per position, the later replacing), and an
    advance returns the newest at or below it and forgets all of those."""
    cache = ReplicatedSubscriptionSnapshotCache(max_cached)
    model: dict[Position, CachedSnapshot] = {}
    for number, (is_add, position) in enumerate(operations):
        if is_add:
            snapshot = CachedSnapshot(str(number), position, (), None)
            cache.add_new_snapshot(snapshot)
            model[position] = snapshot
            for old in sorted(model)[: max(0, len(model) - max_cached)]:
                del model[old]
        else:
            passed = [p for p in sorted(model) if p <= position]
            expected = model[passed[-1]] if passed else None
            for p in passed:
                del model[p]
            assert cache.advanced_mark_delete_position(position) == expected
        assert cache.snapshots() == [model[p] for p in sorted(model)]
        assert len(cache) <= max_cached
