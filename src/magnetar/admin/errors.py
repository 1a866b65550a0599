"""Errors as Pulsar's admin API answers them: a status code and a JSON body `{"reason": "..."}`; and its
answer for a policy that was never set."""

from __future__ import annotations

import html
from typing import Any

from fastapi import Response
from pydantic import BaseModel

__all__ = [
    "UNSET_POLICY",
    "ErrorBody",
    "Responses",
    "RestError",
    "bad_request",
    "conflict",
    "error_page",
    "error_responses",
    "not_found",
    "precondition_failed",
    "unset_policy",
]


# A route's `responses=` for the OpenAPI document: status (or "default") -> its description or model.
Responses = dict[int | str, dict[str, Any]]


class ErrorBody(BaseModel):
    """Pulsar's error body."""

    reason: str


def error_responses(*statuses: int) -> Responses:
    """OpenAPI entries for the error statuses a route answers, each with the `{"reason"}` body (400 is
    always there: an unreadable body or parameter, as Jersey answers it)."""
    return {status: {"model": ErrorBody} for status in sorted({400, *statuses})}


class RestError(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def bad_request(reason: str) -> RestError:
    return RestError(400, reason)


def not_found(reason: str) -> RestError:
    return RestError(404, reason)


def conflict(reason: str) -> RestError:
    return RestError(409, reason)


def precondition_failed(reason: str) -> RestError:
    return RestError(412, reason)


# The route extension of a GET whose policy may never have been set: Pulsar 4.0.7 answers it with 200 and
# an empty body (no content type), a shape an OpenAPI document cannot declare beside the policy's JSON.
# The extension says so to the document's readers, and to the fuzz test.
UNSET_POLICY: dict[str, Any] = {"x-magnetar-empty-when-unset": True}


def unset_policy() -> Response:
    """The answer for a policy that was never set, as Pulsar 4.0.7 gives it: 200 and no body."""
    return Response(status_code=200)


def error_page(status: int, message: str, path: str) -> str:
    """The shape of the error page Pulsar's web server (Jetty) writes for a path it does not serve."""
    title = f"{status} {html.escape(message)}"
    return (
        "<html>\n<head>\n"
        '<meta http-equiv="Content-Type" content="text/html;charset=utf-8"/>\n'
        f"<title>Error {title}</title>\n</head>\n"
        f"<body><h2>HTTP ERROR {title}</h2>\n<table>\n"
        f"<tr><th>URI:</th><td>{html.escape(path)}</td></tr>\n"
        f"<tr><th>STATUS:</th><td>{status}</td></tr>\n"
        f"<tr><th>MESSAGE:</th><td>{html.escape(message)}</td></tr>\n"
        "</table>\n</body>\n</html>\n"
    )
