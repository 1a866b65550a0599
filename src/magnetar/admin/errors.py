"""Errors as Pulsar's admin API answers them: a status code and a JSON body `{"reason": "..."}`."""

from __future__ import annotations

__all__ = ["RestError", "bad_request", "conflict", "not_found", "precondition_failed"]


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
