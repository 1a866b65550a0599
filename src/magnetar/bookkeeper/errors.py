"""The errors of the BookKeeper client, with BookKeeper's names and codes (`BKException.Code`).

Owns: `BKError` and its subclasses, the mapping from a bookie's v2 return code to them. Must not touch:
sockets, metadata or ledgers; it is the vocabulary the other modules raise.
"""

from __future__ import annotations

__all__ = [
    "BKError",
    "BookieHandleNotAvailableError",
    "ClientClosedError",
    "DataUnknownError",
    "DigestMatchError",
    "LedgerClosedError",
    "LedgerExistError",
    "LedgerFencedError",
    "LedgerIdOverflowError",
    "MetadataSerializationError",
    "MetadataVersionError",
    "NoSuchEntryError",
    "NoSuchLedgerError",
    "NotEnoughBookiesError",
    "ReadError",
    "BKTimeoutError",
    "TooManyRequestsError",
    "UnauthorizedAccessError",
    "WriteError",
    "WriteOnReadOnlyBookieError",
    "error_for_rc",
]


class BKError(Exception):
    """A BookKeeper operation failed; `code` is BookKeeper's `BKException.Code` for the same failure."""

    code = -999
    name = "UnexpectedConditionException"

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.name)


class ReadError(BKError):
    code, name = -1, "ReadException"


class DigestMatchError(BKError):
    code, name = -5, "DigestMatchException"


class NotEnoughBookiesError(BKError):
    code, name = -6, "NotEnoughBookiesException"


class NoSuchLedgerError(BKError):
    code, name = -7, "NoSuchLedgerExistsException"


class BookieHandleNotAvailableError(BKError):
    code, name = -8, "BookieHandleNotAvailableException"


class LedgerClosedError(BKError):
    code, name = -11, "LedgerClosedException"


class WriteError(BKError):
    code, name = -12, "WriteException"


class NoSuchEntryError(BKError):
    code, name = -13, "NoSuchEntryException"


class MetadataVersionError(BKError):
    code, name = -17, "MetadataVersionException"


class ClientClosedError(BKError):
    code, name = -19, "ClientClosedException"


class LedgerExistError(BKError):
    code, name = -20, "LedgerExistException"


class BKTimeoutError(BKError):
    code, name = -23, "TimeoutException"


class LedgerFencedError(BKError):
    code, name = -101, "LedgerFencedException"


class UnauthorizedAccessError(BKError):
    code, name = -102, "UnauthorizedAccessException"


class WriteOnReadOnlyBookieError(BKError):
    code, name = -104, "WriteOnReadOnlyBookieException"


class TooManyRequestsError(BKError):
    code, name = -105, "TooManyRequestsException"


class LedgerIdOverflowError(BKError):
    code, name = -106, "LedgerIdOverflowException"


class MetadataSerializationError(BKError):
    code, name = -107, "MetadataSerializationException"


class DataUnknownError(BKError):
    code, name = -108, "DataUnknownException"


# A bookie's v2 return code (BookieProtocol.E*) to the client error, as PerChannelBookieClient maps them.
_BY_RC: dict[int, type[BKError]] = {
    1: NoSuchLedgerError,  # ENOLEDGER
    2: NoSuchEntryError,  # ENOENTRY
    102: UnauthorizedAccessError,  # EUA
    104: LedgerFencedError,  # EFENCED
    105: WriteOnReadOnlyBookieError,  # EREADONLY
    106: TooManyRequestsError,  # ETOOMANYREQUESTS
    107: DataUnknownError,  # EUNKNOWNLEDGERSTATE
}


def error_for_rc(rc: int, context: str, *, add: bool) -> BKError:
    """The client error for a bookie's non-zero v2 return code `rc`, its message naming `context`.

    EBADREQ, EIO, EBADVERSION and unknown codes are this bookie's failure to do the request: a
    WriteException for an add, a ReadException for a read, as the Java client reports them.
    """
    kind = _BY_RC.get(rc, WriteError if add else ReadError)
    return kind(f"{kind.name} (bookie rc {rc}) {context}")
