"""HTTP lookup: Pulsar's `/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}`.

A client whose service URL is `http://host:8080` asks here which broker serves a topic (and reads
partition metadata from the admin API), then talks the binary protocol to the broker it was given.
Owns: the lookup answer (this broker: a standalone owns every topic; a broker of a cluster answers the
owner's URLs, or a 307 to the broker that decides, as Pulsar's TopicLookupBase) and when Pulsar refuses one.
Must not touch: state; a lookup creates nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from fastapi import APIRouter, Header, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import BaseModel

from magnetar.admin.clusters import check_namespace
from magnetar.admin.errors import RestError, error_responses, not_found, precondition_failed
from magnetar.broker.cluster.ownership import BundleNotOwnedError
from magnetar.broker.config import UnknownListener
from magnetar.broker.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.context import BrokerContext

__all__ = ["LookupData", "router"]

router = APIRouter(prefix="/lookup/v2/topic", tags=["lookup"])


class LookupData(BaseModel):
    """Pulsar's LookupData. The TLS URLs are null without TLS ports but present: the C++ client (and
    so the Python one) refuses a lookup answer without `brokerUrlTls`."""

    brokerUrl: str
    brokerUrlTls: str | None
    httpUrl: str
    httpUrlTls: str | None
    nativeUrl: str


@router.get(
    "/{domain}/{tenant}/{namespace}/{topic}", response_model=LookupData, responses=error_responses(404, 412, 500)
)
async def lookup_topic(
    request: Request,
    domain: str,
    tenant: str,
    namespace: str,
    topic: str,
    authoritative: bool = False,
    listenerName: str = "",
    listener_header: str = Header("", alias="X-Pulsar-ListenerName"),
) -> LookupData | Response:
    """As TopicLookupBase: a topic that does not exist is found only when it would be auto-created,
    or when it is non-persistent and not partitioned (Pulsar has no metadata to check those against).
    The `listenerName` query parameter, else the `X-Pulsar-ListenerName` header (the Java client's),
    picks an advertised listener's broker URLs; a name the broker does not have is a 500, as Pulsar's
    PulsarServerException is."""
    context: BrokerContext = request.app.state.context
    try:
        name = TopicName.parse(f"{domain}://{tenant}/{namespace}/{topic}")
    except InvalidTopicName as error:
        raise precondition_failed("Topic name is not valid") from error
    check_namespace(context, tenant, namespace)
    found = (
        context.config["allowAutoTopicCreation"]
        or (name.domain == "non-persistent" and name.partition_index < 0)
        or context.registry.topic_exists(name)
        or context.registry.partitions(name) > 0
        or 0 <= name.partition_index < context.registry.partitions(name.partitioned_base)
    )
    if not found:
        raise not_found("Topic not found.")
    try:
        result = await context.lookup.lookup(name, listenerName.strip() or listener_header.strip(), authoritative)
    except (UnknownListener, BundleNotOwnedError) as error:
        raise RestError(500, str(error)) from error
    if result.redirect:
        # TopicLookupBase: the broker that decides is asked the same, `authoritative` when it must own it.
        target = urlsplit(result.http_url)
        url = request.url.replace(scheme=target.scheme, netloc=target.netloc)
        url = url.include_query_params(authoritative="true" if result.authoritative else "false")
        return RedirectResponse(str(url), status_code=307)
    return LookupData(
        brokerUrl=result.broker_url,
        brokerUrlTls=result.broker_url_tls,
        httpUrl=result.http_url,
        httpUrlTls=result.http_url_tls,
        nativeUrl=result.broker_url,
    )
