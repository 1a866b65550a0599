"""Which live broker gets a bundle nobody owns: a subset of Pulsar's ModularLoadManagerImpl with its
LeastLongTermMessageRate strategy.

Owns: the choice among the brokers' LocalBrokerData: the fewest bundles, then the lowest message rate in
and out, then the broker id (so that every broker deciding from the same data decides alike).
Must not touch: the store; it is pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from magnetar.broker.cluster.brokers import LocalBrokerData

__all__ = ["select_broker_for_assignment"]


def select_broker_for_assignment(brokers: Mapping[str, LocalBrokerData]) -> str | None:
    """The id of the least loaded broker, None when there is none."""
    if not brokers:
        return None
    return min(
        brokers,
        key=lambda broker_id: (
            brokers[broker_id].num_bundles,
            brokers[broker_id].msg_rate_in + brokers[broker_id].msg_rate_out,
            broker_id,
        ),
    )
