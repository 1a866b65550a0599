"""A fake bookie: what a BookKeeper bookie keeps and answers, through the real v2 codec.

Owns: `Bookie` (entries per ledger, the fence flag and master key of each ledger, all of which its journal
keeps across a crash, as `journalSyncData=true` bookies do), `answer` (one decoded request in, one encoded
response out, as `WriteEntryProcessor` and `ReadEntryProcessor` answer it) and `FakeBookies` (bookies
behind `BookieTransport` without connections, for the client's unit tests). Must not touch: the client's
code; the network between them is network.py's.

What the answers follow from 4.18's bookie: an add to a fenced ledger fails with EFENCED unless it is a
recovery add; an add or fencing read whose master key differs from the one the ledger was first written
or fenced with fails with EUA; a fencing read fences before it reads; entry -1 is the ledger's highest
entry; a ledger the bookie never heard of is ENOLEDGER, a known one without the entry ENOENTRY.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

from magnetar.bookkeeper import wire
from magnetar.bookkeeper.errors import BookieHandleNotAvailableError, error_for_rc

__all__ = ["Bookie", "FakeBookies", "answer"]


class Bookie:
    """One bookie's journal: `entries[(ledger, entry)]` is the body as the client sent it."""

    def __init__(self) -> None:
        self.entries: dict[tuple[int, int], bytes] = {}
        self.last_entry: dict[int, int] = {}
        self.fenced: set[int] = set()
        self.master_keys: dict[int, bytes] = {}

    def _key_matches(self, ledger_id: int, key: bytes | None) -> bool:
        if key is None:
            return True
        return self.master_keys.setdefault(ledger_id, key) == key

    def store(self, ledger_id: int, entry_id: int, body: bytes) -> None:
        self.entries[(ledger_id, entry_id)] = body
        self.last_entry[ledger_id] = max(entry_id, self.last_entry.get(ledger_id, entry_id))

    def add(self, request: wire.AddRequest) -> bytes:
        recovery = bool(request.flags & wire.FLAG_RECOVERY_ADD)
        if not self._key_matches(request.ledger_id, request.master_key):
            rc = wire.EUA
        elif request.ledger_id in self.fenced and not recovery:
            rc = wire.EFENCED
        else:
            self.store(request.ledger_id, request.entry_id, request.body)
            rc = wire.EOK
        return wire.encode_add_response(rc, request.ledger_id, request.entry_id)

    def read(self, request: wire.ReadRequest) -> bytes:
        ledger_id, entry_id = request.ledger_id, request.entry_id
        if request.flags & wire.FLAG_DO_FENCING:
            if not self._key_matches(ledger_id, request.master_key):
                return wire.encode_read_response(wire.EUA, ledger_id, entry_id)
            self.fenced.add(ledger_id)
        found = self.last_entry.get(ledger_id) if entry_id == wire.LAST_ADD_CONFIRMED else entry_id
        body = self.entries.get((ledger_id, found)) if found is not None else None
        if body is not None:
            return wire.encode_read_response(wire.EOK, ledger_id, entry_id, body)
        known = ledger_id in self.last_entry or ledger_id in self.fenced
        return wire.encode_read_response(wire.ENOENTRY if known else wire.ENOLEDGER, ledger_id, entry_id)


def answer(bookie: Bookie, request: wire.AddRequest | wire.ReadRequest) -> bytes:
    """The response frame to `request`, the bookie's state changed as the request changes it."""
    if isinstance(request, wire.AddRequest):
        return bookie.add(request)
    return bookie.read(request)


class _Entries:
    """`entries[bookie]` is that bookie's dict, so a test can look at or corrupt what a bookie stores."""

    def __init__(self, bookies: defaultdict[str, Bookie]) -> None:
        self._bookies = bookies

    def __getitem__(self, bookie: str) -> dict[tuple[int, int], bytes]:
        return self._bookies[bookie].entries


class FakeBookies:
    """Bookies behind `BookieTransport`: every request and answer goes through the v2 codec, answers come
    back on a later loop turn (in reverse order with `reverse_answers`), and a bookie can be down (its
    requests fail as a lost connection does) or silent (they are never answered)."""

    def __init__(self, reverse_answers: bool = False) -> None:
        self.bookies: defaultdict[str, Bookie] = defaultdict(Bookie)
        self.entries = _Entries(self.bookies)
        self.down: set[str] = set()
        self.silent: set[str] = set()
        self.reverse_answers = reverse_answers
        self._answers: list[tuple[asyncio.Future[object], bytes, str]] = []
        self._scheduled = False

    def _request(self, bookie: str, frame: bytes) -> asyncio.Future[object]:
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        (request,) = wire.RequestDecoder().receive_data(frame)
        if bookie in self.down:
            asyncio.get_running_loop().call_soon(_fail, future, BookieHandleNotAvailableError(f"{bookie} is down"))
        elif bookie not in self.silent:
            self._answers.append((future, answer(self.bookies[bookie], request), bookie))
            if not self._scheduled:
                self._scheduled = True
                asyncio.get_running_loop().call_soon(self._deliver)
        return future

    def _deliver(self) -> None:
        self._scheduled = False
        answers, self._answers = self._answers, []
        if self.reverse_answers:
            answers.reverse()
        for future, frame, bookie in answers:
            (response,) = wire.ResponseDecoder().receive_data(frame)
            if future.done():
                continue
            if response.rc != wire.EOK:
                future.set_exception(
                    error_for_rc(response.rc, f"from fake {bookie}", add=isinstance(response, wire.AddResponse))
                )
            else:
                future.set_result(response.body if isinstance(response, wire.ReadResponse) else None)

    def add_entry(self, bookie: str, ledger_id: int, entry_id: int, frame: bytes) -> asyncio.Future[None]:
        return self._request(bookie, frame)  # type: ignore[return-value]  # an add's future resolves to None

    def read_entry(
        self, bookie: str, ledger_id: int, entry_id: int, flags: int = wire.FLAG_NONE, master_key: bytes | None = None
    ) -> asyncio.Future[bytes]:
        frame = wire.encode_read_request(ledger_id, entry_id, flags, master_key)
        return self._request(bookie, frame)  # type: ignore[return-value]  # a read's future resolves to the body


def _fail(future: asyncio.Future[object], error: Exception) -> None:
    if not future.done():
        future.set_exception(error)
