"""In-process bookies behind `BookieTransport`, for deterministic tests of the ledger logic: every request
and answer goes through the v2 codec, answers come back on a later loop turn (in reverse order with
`reverse_answers`), and a bookie can be down, silent or missing entries."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from magnetar.bookkeeper import wire
from magnetar.bookkeeper.errors import BookieHandleNotAvailableError, error_for_rc


class FakeBookies:
    def __init__(self, reverse_answers: bool = False) -> None:
        self.entries: dict[str, dict[tuple[int, int], bytes]] = defaultdict(dict)
        self.fenced: dict[str, set[int]] = defaultdict(set)
        self.down: set[str] = set()
        self.silent: set[str] = set()
        self.reverse_answers = reverse_answers
        self._answers: list[tuple[asyncio.Future[object], bytes, str]] = []
        self._scheduled = False

    def _answer(self, future: asyncio.Future[object], response: bytes, bookie: str) -> None:
        self._answers.append((future, response, bookie))
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._deliver)

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

    def _unreachable(self, bookie: str, future: asyncio.Future[object]) -> bool:
        if bookie in self.down:
            asyncio.get_running_loop().call_soon(
                lambda: future.done() or future.set_exception(BookieHandleNotAvailableError(f"{bookie} is down"))
            )
            return True
        return bookie in self.silent

    def add_entry(self, bookie: str, ledger_id: int, entry_id: int, frame: bytes) -> asyncio.Future[None]:
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        (request,) = wire.RequestDecoder().receive_data(frame)
        assert isinstance(request, wire.AddRequest)
        assert (request.ledger_id, request.entry_id) == (ledger_id, entry_id)
        if not self._unreachable(bookie, future):
            recovery = bool(request.flags & wire.FLAG_RECOVERY_ADD)
            if ledger_id in self.fenced[bookie] and not recovery:
                rc = wire.EFENCED
            else:
                self.entries[bookie][(ledger_id, entry_id)] = request.body
                rc = wire.EOK
            self._answer(future, wire.encode_add_response(rc, ledger_id, entry_id), bookie)
        return future  # type: ignore[return-value]

    def read_entry(
        self, bookie: str, ledger_id: int, entry_id: int, flags: int = wire.FLAG_NONE, master_key: bytes | None = None
    ) -> asyncio.Future[bytes]:
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        (request,) = wire.RequestDecoder().receive_data(
            wire.encode_read_request(ledger_id, entry_id, flags, master_key)
        )
        assert isinstance(request, wire.ReadRequest)
        if not self._unreachable(bookie, future):
            if request.flags & wire.FLAG_DO_FENCING:
                self.fenced[bookie].add(ledger_id)
            stored = self.entries[bookie]
            ids = [entry for ledger, entry in stored if ledger == ledger_id]
            if entry_id == wire.LAST_ADD_CONFIRMED:
                entry_id_found = max(ids) if ids else None
            else:
                entry_id_found = entry_id if (ledger_id, entry_id) in stored else None
            if entry_id_found is None:
                rc = wire.ENOLEDGER if not ids and ledger_id not in self.fenced[bookie] else wire.ENOENTRY
                frame = wire.encode_read_response(rc, ledger_id, entry_id)
            else:
                frame = wire.encode_read_response(wire.EOK, ledger_id, entry_id, stored[(ledger_id, entry_id_found)])
            self._answer(future, frame, bookie)
        return future  # type: ignore[return-value]
