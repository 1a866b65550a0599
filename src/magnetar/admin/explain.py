"""Admin routes beyond Pulsar: what a subscription's consumers hold, and why a key does not flow.

Owns: `GET .../{topic}/subscription/{sub}/pendingAcks` (each consumer's pending messages: message id,
sticky hash, redelivery count, time sent; PIP-379 proposes it, Pulsar never built it) and
`.../subscription/{sub}/keys/{key}` and `.../hashes/{hash}` (which consumer owns the hash now, which one
it drains from, which messages hold it and since when, how many deliveries it blocked, what waits in
the replay queue for it), rendered from the core's answers (`core/explain.py`).
Must not touch: state, or any ordering rule: every fact and reason comes from the dispatcher's queries,
which use the predicates its decisions use.
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Path, Request

from magnetar.admin.errors import bad_request, error_responses, precondition_failed
from magnetar.admin.stats import find_subscription, iso_time
from magnetar.broker import figures
from magnetar.core.dispatchers import KeySharedDispatcher, SharedDispatcher
from magnetar.core.explain import HashExplanation, PendingMessage
from magnetar.core.sticky_key import consistent_hashing_slot, key_hash, range_slot

if TYPE_CHECKING:
    from magnetar.broker.subscription import PersistentSubscription

__all__ = ["router", "REASONS"]

router = APIRouter(prefix="/admin/v2/persistent/{tenant}/{namespace}/{topic}/subscription/{subscription}")

_ERRORS = error_responses(404, 412)

# What each reason code of core/explain.py means, for people reading the answer.
REASONS = {
    "NO_CONSUMERS": "No consumer is connected to the subscription.",
    "NO_CONSUMER_FOR_HASH": "No consumer's sticky hash ranges hold this hash: it waits for one that does.",
    "DRAINING": "The hash is draining: another consumer still holds unacknowledged messages of it, and "
    "the owner gets it only once they are acknowledged or that consumer leaves (PIP-379).",
    "NO_PERMITS": "The owner has no permits: its receiver queue is full until the application receives.",
    "CONSUMER_BLOCKED_ON_UNACKED": "The owner holds maxUnackedMessagesPerConsumer unacknowledged messages; it "
    "gets more once it acknowledges half of them.",
    "SUBSCRIPTION_BLOCKED_ON_UNACKED": "The subscription holds maxUnackedMessagesPerSubscription "
    "unacknowledged messages.",
    "RECENTLY_JOINED": "The owner joined recently: it gets only messages up to its join position until the "
    "mark-delete position passes it.",
    "IN_REPLAY_QUEUE": "Messages of this hash wait in the replay queue; newer messages of their keys wait behind them.",
    "LOOK_AHEAD_LIMIT": "The replay queue is at its look-ahead limit: no new messages are read for any key "
    "until it shrinks.",
    "DELAYED": "Messages of this hash carry a deliver-at time still ahead.",
}


def _message_id(position: tuple[int, int]) -> str:
    ledger_id, entry_id = position
    return f"{ledger_id}:{entry_id}"


def _pending(message: PendingMessage, wanted_key_hash: int | None = None) -> dict[str, Any]:
    ledger_id, entry_id = message.position
    rendered: dict[str, Any] = {
        "messageId": _message_id(message.position),
        "ledgerId": ledger_id,
        "entryId": entry_id,
        "consumerName": message.consumer_name,
        "consumerId": message.consumer_id,
        "batchSize": message.batch_size,
        "unackedMessages": message.unacked_messages,
        "keyHash": message.key_hash,
    }
    if message.sticky_hash is not None:
        rendered["stickyKeyHash"] = message.sticky_hash
    if wanted_key_hash is not None:
        rendered["sameKey"] = message.key_hash == wanted_key_hash
    rendered["redeliveryCount"] = message.redelivery_count
    rendered["sentTimestamp"] = message.sent_at_ms
    rendered["sentTime"] = iso_time(message.sent_at_ms)
    return rendered


def _multi_consumer(subscription: PersistentSubscription) -> SharedDispatcher | None:
    """The Shared or Key_Shared dispatcher, None while no consumer is connected; 412 for Exclusive and
    Failover, which keep no pending acks (Pulsar rewinds their cursor to redeliver)."""
    dispatcher = subscription.dispatcher
    if dispatcher is not None and not isinstance(dispatcher, SharedDispatcher):
        raise precondition_failed(
            f"Subscription {subscription.name} is {subscription.subscription_type}: it keeps no pending acks"
        )
    return dispatcher


@router.get("/pendingAcks", tags=["explain"], responses=_ERRORS)
async def get_pending_acks(
    request: Request, tenant: str, namespace: str, topic: str, subscription: str
) -> dict[str, Any]:
    """Each connected consumer's messages sent and not acknowledged yet, in position order."""
    found = await find_subscription(request, tenant, namespace, topic, subscription)
    dispatcher = _multi_consumer(found)
    consumers: dict[int, dict[str, Any]] = {}
    if dispatcher is not None:
        for consumer_id, consumer in dispatcher.consumers.items():
            consumers[consumer_id] = {"consumerName": consumer.name, "consumerId": consumer_id, "pendingAcks": []}
        for message in dispatcher.pending_messages():
            consumers[message.consumer_id]["pendingAcks"].append(_pending(message))
    for entry in consumers.values():
        entry["unackedMessages"] = sum(m["unackedMessages"] for m in entry["pendingAcks"])
    return {
        "subscription": found.name,
        "type": found.subscription_type,
        "consumers": list(consumers.values()),
    }


def _key_bytes(key: str, base64_encoded: bool) -> bytes:
    if not base64_encoded:
        return key.encode()
    try:
        return base64.b64decode(key, validate=True)
    except (binascii.Error, ValueError) as error:
        raise bad_request(f"key is not valid base64: {error}") from error


def _explanation(
    subscription: PersistentSubscription,
    dispatcher: KeySharedDispatcher,
    answer: HashExplanation,
    key_hash_wanted: int | None,
) -> dict[str, Any]:
    pending = [_pending(m, key_hash_wanted) for m in answer.pending]
    held_by = [m for m in pending if answer.draining is not None and m["consumerId"] == answer.draining.consumer_id]
    rendered: dict[str, Any] = {
        "stickyKeyHash": answer.sticky_hash,
        "subscription": subscription.name,
        "orderingMode": answer.ordering_mode,
        "keySharedMode": dispatcher.meta.mode if dispatcher.meta else None,
        "flowing": not answer.reasons,
        "reasons": [{"code": code, "description": REASONS[code]} for code in answer.reasons],
        "consumer": (
            {
                "consumerName": answer.owner_name,
                "consumerId": answer.owner_id,
                "availablePermits": answer.owner_available_permits,
                "unackedMessages": answer.owner_unacked_messages,
            }
            if answer.owner_id is not None
            else None
        ),
        "drainingFrom": (
            {
                "consumerName": answer.draining.consumer_name,
                "consumerId": answer.draining.consumer_id,
                "unackMsgs": answer.draining.unacked_messages,
                "blockedAttempts": answer.draining.blocked_attempts,
                "heldBy": [m["messageId"] for m in held_by],
                "heldSince": iso_time(min(m["sentTimestamp"] for m in held_by)) if held_by else None,
            }
            if answer.draining is not None
            else None
        ),
        "pendingMessages": pending,
        "replayQueue": [
            {"messageId": _message_id(position), "keyHash": queued}
            | ({"sameKey": queued == key_hash_wanted} if key_hash_wanted is not None else {})
            for position, queued in answer.replay
        ],
        "delayedMessages": [
            {"messageId": _message_id(position), "keyHash": held, "deliverAtTime": at_ms}
            | ({"sameKey": held == key_hash_wanted} if key_hash_wanted is not None else {})
            for position, held, at_ms in answer.delayed
        ],
        "markDeletePosition": _message_id(answer.mark_delete_position),
    }
    if answer.owner_join_position is not None:
        rendered["consumer"]["joinPosition"] = _message_id(answer.owner_join_position)
    return rendered


def _no_dispatcher(subscription: PersistentSubscription, sticky_hash: int) -> dict[str, Any]:
    """With no consumer connected there is no dispatcher: nothing is pending and nothing is queued."""
    return {
        "stickyKeyHash": sticky_hash,
        "subscription": subscription.name,
        "orderingMode": subscription.topic.context.dispatcher_settings.key_shared_ordering_mode,
        "keySharedMode": None,
        "flowing": False,
        "reasons": [{"code": "NO_CONSUMERS", "description": REASONS["NO_CONSUMERS"]}],
        "consumer": None,
        "drainingFrom": None,
        "pendingMessages": [],
        "replayQueue": [],
        "delayedMessages": [],
        "markDeletePosition": _message_id(figures.mark_delete_position(subscription)),
    }


def _key_shared(subscription: PersistentSubscription) -> KeySharedDispatcher | None:
    dispatcher = _multi_consumer(subscription)
    if dispatcher is not None and not isinstance(dispatcher, KeySharedDispatcher):
        raise precondition_failed(f"Subscription {subscription.name} is Shared: it routes no keys")
    return dispatcher


@router.get("/keys/{key:path}", tags=["explain"], responses=_ERRORS)
async def explain_key(
    request: Request, tenant: str, namespace: str, topic: str, subscription: str, key: str, base64Encoded: bool = False
) -> dict[str, Any]:
    """Why messages with this key do or do not flow. The key is the message's ordering key or partition
    key as text (UTF-8), or its bytes in base64 with `base64Encoded=true`."""
    found = await find_subscription(request, tenant, namespace, topic, subscription)
    dispatcher = _key_shared(found)
    raw = _key_bytes(key, base64Encoded)
    wanted = key_hash(raw)
    if dispatcher is None:
        settings = found.topic.context.dispatcher_settings
        slot = consistent_hashing_slot if settings.use_consistent_hashing else range_slot
        rendered = _no_dispatcher(found, slot(wanted))
    else:
        _key_hash, sticky_hash = dispatcher.sticky_hash_of_key(raw)
        rendered = _explanation(found, dispatcher, dispatcher.explain_hash(sticky_hash, wanted), wanted)
    return {"key": key, "keyHash": wanted, **rendered}


@router.get("/hashes/{sticky_hash}", tags=["explain"], responses=_ERRORS)
async def explain_hash(
    request: Request,
    tenant: str,
    namespace: str,
    topic: str,
    subscription: str,
    sticky_hash: Annotated[int, Path(ge=0, le=65535)],
) -> dict[str, Any]:
    """Why messages with this sticky key hash (as `drainingHashes` and `keyHashRangeArrays` show it) do
    or do not flow."""
    found = await find_subscription(request, tenant, namespace, topic, subscription)
    dispatcher = _key_shared(found)
    if dispatcher is None:
        return _no_dispatcher(found, sticky_hash)
    return _explanation(found, dispatcher, dispatcher.explain_hash(sticky_hash), None)
