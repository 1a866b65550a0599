"""Admin routes of replicated subscriptions (PIP-33), at Pulsar 4.0's paths below
`/admin/v2/persistent/{tenant}/{namespace}/{topic}/subscription/{subName}`:
`POST replicatedSubscriptionStatus` (body `true` or `false`) and `GET replicatedSubscriptionStatus`.

Owns: turning a status change into `PersistentTopic.set_subscription_replicated` on the topic or on every
partition of a partitioned topic, and Pulsar's answers when it cannot be done (PersistentTopicsBase's
replicated-subscription status operations; the refusal when replicated subscriptions are off is apache/pulsar#21510).
Must not touch: what a replicated subscription does (broker/topic.py, broker/subscription.py); creating a
replicated subscription (`PUT …/subscription/{subName}?replicated=true`, topics.py); stats (stats.py).

A status change is local to the cluster it is made in, as in Pulsar (its testReplicatedSubscriptionRestApi1):
the other clusters keep their own.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Body, Request, Response

from magnetar.admin.errors import Responses, RestError, error_responses, not_found
from magnetar.admin.stats import topic_name
from magnetar.admin.topics import topic_domain
from magnetar.broker.registry import TopicNotFoundError

if TYPE_CHECKING:
    from magnetar.broker.context import BrokerContext
    from magnetar.broker.subscription import PersistentSubscription
    from magnetar.broker.topic_name import TopicName

__all__ = ["router"]

log = logging.getLogger(__name__)

# Mounted by app.py at /admin/v2/persistent and /admin/v2/non-persistent (the latter answers 405).
router = APIRouter(prefix="/{tenant}/{namespace}/{topic}/subscription/{subName}", tags=["persistent topic"])

_PATH = "/replicatedSubscriptionStatus"
_NO_CONTENT: Responses = {204: {"description": "Done"}}


async def _subscriptions(context: BrokerContext, name: TopicName, subscription: str) -> list[PersistentSubscription]:
    """The subscription on the topic, or on every partition of a partitioned topic: Pulsar asks each
    partition, and one without the subscription fails the whole call (404)."""
    partitions = context.registry.partitions(name)
    targets = [name.partition(i) for i in range(partitions)] if partitions else [name]
    found = []
    for target in targets:
        if not context.registry.topic_exists(target):
            raise not_found(f"Topic {target} not found" if not partitions else "Topic or subscription not found")
        try:
            topic = await context.registry.get_topic(target, create=False)
        except TopicNotFoundError as error:
            raise not_found(f"Topic {target} not found") from error
        sub = topic.subscriptions.get(subscription)
        if sub is None:
            raise not_found(
                f"Subscription {subscription} not found for topic {target}"
                if not partitions
                else "Topic or subscription not found"
            )
        found.append(sub)
    return found


@router.post(_PATH, status_code=204, responses=_NO_CONTENT | error_responses(404, 405, 412, 500))
async def set_replicated_subscription_status(
    request: Request,
    tenant: str,
    namespace: str,
    topic: str,
    subName: str,
    enabled: Annotated[bool, Body(strict=True, description="Whether the subscription is replicated")],
) -> Response:
    """Make a subscription replicated, or no longer (on every partition of a partitioned topic)."""
    if topic_domain(request) != "persistent":
        raise RestError(405, "Cannot enable/disable replicated subscriptions on non-persistent topics")
    context: BrokerContext = request.app.state.context
    name = topic_name(request, tenant, namespace, topic)
    subscriptions = await _subscriptions(context, name, subName)
    # Pulsar's PersistentSubscription.setReplicated(true) fails when enableReplicatedSubscriptions is off
    # (#21510: it had set the status in memory and said nothing), and so does a reader's non-durable
    # cursor, which has no properties to keep the status in.
    refused = enabled and not context.config["enableReplicatedSubscriptions"]
    if refused or any(not s.durable for s in subscriptions):
        log.warning(
            "Failed to set replicated subscription status of %s on %s to %s%s",
            subName,
            name,
            enabled,
            ": enableReplicatedSubscriptions is false" if refused else ": the subscription is not durable",
        )
        raise RestError(500, "Failed to update cursor properties")
    for subscription in subscriptions:
        await subscription.topic.set_subscription_replicated(subscription, enabled)
    log.info("Changed replicated subscription status to %s - %s %s", enabled, name, subName)
    return Response(status_code=204)


@router.get(_PATH, response_model=dict[str, bool], responses=error_responses(404, 405, 412))
async def get_replicated_subscription_status(
    request: Request, tenant: str, namespace: str, topic: str, subName: str
) -> dict[str, bool]:
    """Whether the subscription is replicated, by topic name (by partition for a partitioned topic)."""
    if topic_domain(request) != "persistent":
        raise RestError(405, "Cannot get replicated subscriptions on non-persistent topics")
    context: BrokerContext = request.app.state.context
    name = topic_name(request, tenant, namespace, topic)
    return {str(s.topic.name): s.replicated for s in await _subscriptions(context, name, subName)}
