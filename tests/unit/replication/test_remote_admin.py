"""What a replicating cluster accepts from another cluster's admin API when it gives a partitioned topic its
partitions: any 2xx (the remote may be Pulsar, which answers 200 or 204, or magnetar), and a refusal only
when the remote has as many partitions anyway. The remote is a stand-in for `_request`: no network."""

from __future__ import annotations

import asyncio
import json

import pytest

from magnetar.client.security import ClientSecurity
from magnetar.replication import remote_admin
from magnetar.replication.remote_admin import RemoteAdminError, ensure_partitioned_topic

TOPIC = "persistent://geo/ns/orders"
ADMIN = "http://remote:8080"


class Remote:
    """The remote's partitioned topic: `partitions` it has, the answer it gives to a change, and the
    number another cluster gives the topic meanwhile (between our GET and our change)."""

    def __init__(self, partitions: int, answer: int, meanwhile: int | None = None) -> None:
        self.partitions = partitions
        self.answer = answer
        self.meanwhile = meanwhile
        self.calls: list[tuple[str, object]] = []

    def request(self, method: str, url: str, body: object, security: ClientSecurity) -> tuple[int, bytes]:
        assert url == f"{ADMIN}/admin/v2/persistent/geo/ns/orders/partitions"
        self.calls.append((method, body))
        if method == "GET":
            found = self.partitions > 0
            return (200, json.dumps({"partitions": self.partitions}).encode()) if found else (404, b"{}")
        if self.meanwhile is not None:
            self.partitions = self.meanwhile
        if 200 <= self.answer < 300:
            assert isinstance(body, int)
            self.partitions = body
        return self.answer, b"" if self.answer < 300 else b'{"reason": "refused"}'


def ensure(remote: Remote, partitions: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote_admin, "_request", remote.request)
    asyncio.run(ensure_partitioned_topic(ADMIN, TOPIC, partitions))


@pytest.mark.parametrize("answer", [200, 204])
def test_a_2xx_is_success_from_pulsar_or_magnetar(answer: int, monkeypatch: pytest.MonkeyPatch) -> None:
    for had, method in ((0, "PUT"), (2, "POST")):
        remote = Remote(had, answer)
        ensure(remote, 4, monkeypatch)
        assert remote.calls == [("GET", None), (method, 4)]
        assert remote.partitions == 4


def test_enough_partitions_already_sends_no_change(monkeypatch: pytest.MonkeyPatch) -> None:
    remote = Remote(4, 500)
    ensure(remote, 4, monkeypatch)
    assert remote.calls == [("GET", None)]


def test_fewer_refused_because_another_cluster_gave_more_meanwhile(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pulsar 4.0.7 and magnetar answer 422 to fewer partitions than the topic has: no failure then."""
    remote = Remote(2, 422, meanwhile=6)
    ensure(remote, 4, monkeypatch)
    assert remote.calls == [("GET", None), ("POST", 4), ("GET", None)]


def test_422_with_still_too_few_partitions_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 422 for another reason (more than the remote's maxNumPartitionsPerPartitionedTopic) is a refusal."""
    remote = Remote(2, 422)
    with pytest.raises(RemoteAdminError, match="refused 4 partitions"):
        ensure(remote, 4, monkeypatch)


def test_created_meanwhile_is_no_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    remote = Remote(0, 409, meanwhile=4)
    ensure(remote, 4, monkeypatch)
    assert remote.calls == [("GET", None), ("PUT", 4)]


def test_other_refusals_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    for answer in (403, 412, 500):
        with pytest.raises(RemoteAdminError, match=f"{answer}"):
            ensure(Remote(2, answer), 4, monkeypatch)
