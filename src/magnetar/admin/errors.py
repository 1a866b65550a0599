"""Errors as Pulsar's admin API answers them: a status code and a JSON body `{"reason": "..."}`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

__all__ = [
    "ErrorBody",
    "Responses",
    "RestError",
    "bad_request",
    "conflict",
    "error_responses",
    "not_found",
    "precondition_failed",
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
