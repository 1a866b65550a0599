"""Admin routes: the schema registry at Pulsar's `/admin/v2/schemas/{tenant}/{namespace}/{topic}` paths,
and the namespace's schema policies at `/admin/v2/namespaces/{tenant}/{namespace}/…`.

Owns: answering with Pulsar's JSON shapes (GetSchemaResponse `version`, `type`, `timestamp`, `data`,
`properties`; `getSchemaResponses`; PostSchemaResponse; DeleteSchemaResponse; IsCompatibilityResponse;
LongSchemaVersionResponse) and status codes (404 when there is no schema, 409 for an incompatible
upload, 422 for a definition its type cannot have). KEY_VALUE definitions travel as Pulsar's admin
API writes them: `{"key": <definition>, "value": <definition>}`. Must not touch: state, except through
the broker's schema registry and `BrokerContext.set_namespace_policies`.

One difference from Pulsar, on purpose: `/compatibility` answers an incompatible schema with
`{"compatibility": false}` (202), where Pulsar's broker lets the checker's exception become a 500.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Body, Path, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from magnetar.admin.clusters import check_namespace
from magnetar.admin.errors import Responses, RestError, error_responses, not_found, precondition_failed
from magnetar.broker.context import BrokerContext
from magnetar.broker.schema_compatibility import (
    STRATEGIES,
    IncompatibleSchemaError,
    SchemaData,
    decode_key_value,
    encode_key_value,
)
from magnetar.broker.schemas import UPLOADABLE_TYPES, InvalidSchemaDataError
from magnetar.broker.topic_name import InvalidTopicName, TopicName
from magnetar.storage.metadata import NotFoundError
from magnetar.storage.schemas import StoredSchema

__all__ = ["GetSchemaResponse", "PostSchemaPayload", "namespace_router", "router"]

router = APIRouter(prefix="/admin/v2/schemas", tags=["schemas"])
namespace_router = APIRouter(prefix="/admin/v2/namespaces", tags=["namespaces"])

if TYPE_CHECKING:  # Literals built at run time, which mypy cannot read: strings to it
    SchemaType = str
    Strategy = str
else:  # FastAPI validates against them and lists them in the OpenAPI document
    SchemaType = Literal[tuple(sorted(UPLOADABLE_TYPES))]
    Strategy = Literal[STRATEGIES]
PathLong = Annotated[int, Path(ge=0, le=2**63 - 1)]
_NO_CONTENT: Responses = {204: {"description": "Done"}}


def _context(request: Request) -> BrokerContext:
    return request.app.state.context


# ------------------------------------------------------------------------------------- models


class GetSchemaResponse(BaseModel):
    version: int
    type: str
    timestamp: int
    data: str
    properties: dict[str, str]


class GetAllVersionsSchemaResponse(BaseModel):
    getSchemaResponses: list[GetSchemaResponse]


class PostSchemaPayload(BaseModel):
    """Pulsar's PostSchemaPayload: the type's name, the definition as text, its properties."""

    model_config = ConfigDict(extra="ignore")

    type: SchemaType
    schema_: str = Field(default="", alias="schema")
    properties: dict[str, str] = {}


class LongSchemaVersion(BaseModel):
    version: int


class PostSchemaResponse(BaseModel):
    version: LongSchemaVersion


class DeleteSchemaResponse(BaseModel):
    version: int


class IsCompatibilityResponse(BaseModel):
    compatibility: bool
    schemaCompatibilityStrategy: str


# ---------------------------------------------------------------------------------- helpers


def _topic(request: Request, tenant: str, namespace: str, topic: str) -> TopicName:
    """The topic named (schemas are per persistent base topic), in a namespace that exists."""
    try:
        name = TopicName.parse(f"persistent://{tenant}/{namespace}/{topic}")
    except InvalidTopicName as error:
        raise precondition_failed("Topic name is not valid") from error
    check_namespace(_context(request), tenant, namespace)
    return name


def _definition_text(stored: StoredSchema) -> str:
    """A version's definition as the admin API writes it (a KEY_VALUE one as JSON of its two parts)."""
    if stored.type != "KEY_VALUE":
        return stored.data.decode(errors="replace")
    parts = decode_key_value(SchemaData(stored.type, stored.data, stored.properties))

    def readable(part: SchemaData) -> Any:
        try:
            return json.loads(part.data) if part.data else ""
        except ValueError:
            return part.data.decode(errors="replace")

    return json.dumps({"key": readable(parts[0]), "value": readable(parts[1])})


def _response(stored: StoredSchema) -> GetSchemaResponse:
    return GetSchemaResponse(
        version=stored.version,
        type=stored.type,
        timestamp=stored.timestamp,
        data=_definition_text(stored),
        properties=dict(stored.properties),
    )


def _schema_data(payload: PostSchemaPayload) -> SchemaData:
    """The payload as the registry keeps it; a KEY_VALUE definition `{"key": …, "value": …}` becomes
    its binary form (Pulsar's convertKeyValueDataStringToSchemaInfoSchema)."""
    if payload.type != "KEY_VALUE":
        return SchemaData(payload.type, payload.schema_.encode(), payload.properties)
    try:
        parts = json.loads(payload.schema_)
        key, value = parts["key"], parts["value"]
    except (ValueError, TypeError, KeyError) as error:
        raise RestError(422, f"Invalid KEY_VALUE schema definition: {error}") from error

    def encoded(part: Any) -> bytes:
        return (part if isinstance(part, str) else json.dumps(part)).encode()

    return SchemaData("KEY_VALUE", encode_key_value(encoded(key), encoded(value)), payload.properties)


# ---------------------------------------------------------------------------------- schemas


@router.get(
    "/{tenant}/{namespace}/{topic}/schema", response_model=GetSchemaResponse, responses=error_responses(404, 412)
)
async def get_schema(request: Request, tenant: str, namespace: str, topic: str) -> GetSchemaResponse:
    name = _topic(request, tenant, namespace, topic)
    schemas = _context(request).schemas
    stored = schemas.latest(name)
    if stored is None:
        # Pulsar's convertToSchemaResponse: the newest version being a deletion marker says so.
        raise not_found("Schema is deleted" if schemas.deleted(name) else "Schema not found")
    return _response(stored)


@router.get(
    "/{tenant}/{namespace}/{topic}/schema/{version}",
    response_model=GetSchemaResponse,
    responses=error_responses(404, 412),
)
async def get_schema_version(
    request: Request, tenant: str, namespace: str, topic: str, version: PathLong
) -> GetSchemaResponse:
    name = _topic(request, tenant, namespace, topic)
    stored = _context(request).schemas.get(name, version)
    if stored is None:
        raise not_found("Schema not found")
    return _response(stored)


@router.get(
    "/{tenant}/{namespace}/{topic}/schemas",
    response_model=GetAllVersionsSchemaResponse,
    responses=error_responses(404, 412),
)
async def get_all_schemas(request: Request, tenant: str, namespace: str, topic: str) -> GetAllVersionsSchemaResponse:
    name = _topic(request, tenant, namespace, topic)
    return GetAllVersionsSchemaResponse(
        getSchemaResponses=[_response(v) for v in _context(request).schemas.versions(name)]
    )


@router.delete(
    "/{tenant}/{namespace}/{topic}/schema", response_model=DeleteSchemaResponse, responses=error_responses(404, 412)
)
async def delete_schema(
    request: Request, tenant: str, namespace: str, topic: str, force: bool = False
) -> DeleteSchemaResponse:
    """A deletion marker (the next version); with `force` every version goes and the next schema is
    version 0 again."""
    name = _topic(request, tenant, namespace, topic)
    return DeleteSchemaResponse(version=await _context(request).schemas.delete(name, force))


@router.post(
    "/{tenant}/{namespace}/{topic}/schema",
    status_code=202,
    response_model=PostSchemaResponse,
    responses=error_responses(404, 409, 412, 422),
)
async def post_schema(
    request: Request, tenant: str, namespace: str, topic: str, payload: PostSchemaPayload
) -> PostSchemaResponse:
    """Upload a schema: its version if an identical one exists, else a new version once compatible
    with the topic's (the namespace's strategy, else the broker's)."""
    name = _topic(request, tenant, namespace, topic)
    schemas = _context(request).schemas
    try:
        version = await schemas.put_if_absent(name, _schema_data(payload), schemas.strategy(name))
    except InvalidSchemaDataError as error:
        raise RestError(422, str(error)) from error
    except IncompatibleSchemaError as error:
        raise RestError(409, str(error)) from error
    return PostSchemaResponse(version=LongSchemaVersion(version=version))


@router.post(
    "/{tenant}/{namespace}/{topic}/compatibility",
    status_code=202,
    response_model=IsCompatibilityResponse,
    responses=error_responses(404, 412, 422),
)
async def check_compatibility(
    request: Request, tenant: str, namespace: str, topic: str, payload: PostSchemaPayload
) -> IsCompatibilityResponse:
    name = _topic(request, tenant, namespace, topic)
    schemas = _context(request).schemas
    strategy = schemas.strategy(name)
    try:
        schemas.check(name, _schema_data(payload), strategy)
    except InvalidSchemaDataError as error:
        raise RestError(422, str(error)) from error
    except IncompatibleSchemaError:
        return IsCompatibilityResponse(compatibility=False, schemaCompatibilityStrategy=strategy)
    return IsCompatibilityResponse(compatibility=True, schemaCompatibilityStrategy=strategy)


@router.post(
    "/{tenant}/{namespace}/{topic}/version",
    status_code=202,
    response_model=LongSchemaVersion,
    responses=error_responses(404, 412, 422),
)
async def get_version_by_schema(
    request: Request, tenant: str, namespace: str, topic: str, payload: PostSchemaPayload
) -> LongSchemaVersion:
    """The version of an identical schema, -1 for none."""
    name = _topic(request, tenant, namespace, topic)
    return LongSchemaVersion(version=_context(request).schemas.find_version(name, _schema_data(payload)))


# ------------------------------------------------------------------------ namespace policies


def _policy(request: Request, tenant: str, namespace: str, key: str) -> Any:
    context = _context(request)
    return context.metadata.namespace_policies(check_namespace(context, tenant, namespace)).get(key)


async def _set_policy(request: Request, tenant: str, namespace: str, key: str, value: Any) -> Response:
    context = _context(request)
    try:
        await context.operations.set_namespace_policies(check_namespace(context, tenant, namespace), {key: value})
    except NotFoundError as error:  # deleted meanwhile
        raise not_found("Namespace does not exist") from error
    return Response(status_code=204)


@namespace_router.get(
    "/{tenant}/{namespace}/schemaCompatibilityStrategy", response_model=Strategy, responses=error_responses(404, 412)
)
async def get_schema_compatibility_strategy(request: Request, tenant: str, namespace: str) -> str:
    return _policy(request, tenant, namespace, "schema_compatibility_strategy") or "UNDEFINED"


@namespace_router.put(
    "/{tenant}/{namespace}/schemaCompatibilityStrategy",
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412),
)
async def set_schema_compatibility_strategy(
    request: Request, tenant: str, namespace: str, strategy: Annotated[Strategy, Body()]
) -> Response:
    """UNDEFINED leaves the choice to the broker's schemaCompatibilityStrategy."""
    value = None if strategy == "UNDEFINED" else strategy
    return await _set_policy(request, tenant, namespace, "schema_compatibility_strategy", value)


@namespace_router.get(
    "/{tenant}/{namespace}/isAllowAutoUpdateSchema", response_model=bool, responses=error_responses(404, 412)
)
async def get_is_allow_auto_update_schema(request: Request, tenant: str, namespace: str) -> Any:
    """The namespace's setting, else the broker's `isAllowAutoUpdateSchemaEnabled` (what Pulsar 4.0.7
    answers for a namespace that never set it, and what applies)."""
    allowed = _policy(request, tenant, namespace, "is_allow_auto_update_schema")
    return _context(request).config["isAllowAutoUpdateSchemaEnabled"] if allowed is None else allowed


@namespace_router.post(
    "/{tenant}/{namespace}/isAllowAutoUpdateSchema", status_code=204, responses=_NO_CONTENT | error_responses(404, 412)
)
async def set_is_allow_auto_update_schema(
    request: Request, tenant: str, namespace: str, allowed: Annotated[bool, Body(strict=True)]
) -> Response:
    return await _set_policy(request, tenant, namespace, "is_allow_auto_update_schema", allowed)


@namespace_router.get(
    "/{tenant}/{namespace}/schemaValidationEnforced", response_model=bool, responses=error_responses(404, 412)
)
async def get_schema_validation_enforced(request: Request, tenant: str, namespace: str, applied: bool = False) -> bool:
    """The namespace's flag; `applied` adds the broker's isSchemaValidationEnforced, which also applies."""
    enforced = bool(_policy(request, tenant, namespace, "schema_validation_enforced"))
    return enforced or (applied and bool(_context(request).config["isSchemaValidationEnforced"]))


@namespace_router.post(
    "/{tenant}/{namespace}/schemaValidationEnforced", status_code=204, responses=_NO_CONTENT | error_responses(404, 412)
)
async def set_schema_validation_enforced(
    request: Request, tenant: str, namespace: str, enforced: Annotated[bool, Body(strict=True)]
) -> Response:
    return await _set_policy(request, tenant, namespace, "schema_validation_enforced", enforced)
