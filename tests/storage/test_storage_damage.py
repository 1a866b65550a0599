"""Damaged files at startup, a full disk and a read-only directory.

Each damage is applied to a copy of the data directory taken while the writing process still had
the files open (what a crash leaves behind), or after a clean close. The contract: a clear error
naming the file, or recovery to the last consistent state; never a silent loss of a completed append.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import crc32c
import pytest

from magnetar.positions import EARLIEST
from magnetar.storage import ManagedLedgerFactory, StorageConfig, StorageCorruptionError, StorageError, sqlite_engine
from magnetar.storage.sqlite_engine import COMMIT_SEQ_FILE, DB_FILE

TOPIC = "persistent://public/default/damage"
CONFIG = StorageConfig(defaultRetentionTimeInMinutes=-1, defaultRetentionSizeInMB=-1)
MARKER = b"MAGNETAR-DAMAGE-MARKER-"


def _write_and_snapshot(source: Path, crash_copy: Path | None, count: int = 50) -> list:
    """Append `count` entries; copy the live files to `crash_copy` before closing (a crash image)."""

    async def main():
        factory = await ManagedLedgerFactory.open(str(source), CONFIG)
        ledger = await factory.open_ledger(TOPIC)
        positions = await asyncio.gather(*(ledger.append(MARKER + b"%05d" % i + b"." * 300) for i in range(count)))
        if crash_copy is not None:
            shutil.copytree(source, crash_copy, ignore=shutil.ignore_patterns("LOCK"))
        await factory.close()
        return positions

    return asyncio.run(main())


def _read_all(data_dir: Path, topic: str = TOPIC) -> list[bytes]:
    async def main():
        factory = await ManagedLedgerFactory.open(str(data_dir), CONFIG)
        try:
            ledger = await factory.open_ledger(topic)
            factory.cache.__init__(factory.cache.capacity_bytes)
            return [entry.data for entry in await ledger.read_entries(EARLIEST, 10_000)]
        finally:
            await factory.close()

    return asyncio.run(main())


def test_a_crash_image_recovers_every_completed_append(tmp_path: Path):
    _write_and_snapshot(tmp_path / "live", tmp_path / "crash")
    assert (tmp_path / "crash" / (DB_FILE + "-wal")).stat().st_size > 0, "the image should need WAL recovery"
    assert len(_read_all(tmp_path / "crash")) == 50


def test_truncated_wal_is_reported_not_silently_cut(tmp_path: Path):
    _write_and_snapshot(tmp_path / "live", tmp_path / "crash")
    wal = tmp_path / "crash" / (DB_FILE + "-wal")
    os.truncate(wal, wal.stat().st_size - 5000)
    with pytest.raises(StorageCorruptionError, match=r"magnetar\.db-wal"):
        _read_all(tmp_path / "crash")


def test_deleted_wal_is_reported(tmp_path: Path):
    _write_and_snapshot(tmp_path / "live", tmp_path / "crash")
    (tmp_path / "crash" / (DB_FILE + "-wal")).unlink()
    with pytest.raises(StorageCorruptionError, match=r"magnetar\.db-wal"):
        _read_all(tmp_path / "crash")


def test_corrupted_wal_frame_is_reported(tmp_path: Path):
    _write_and_snapshot(tmp_path / "live", tmp_path / "crash")
    wal = tmp_path / "crash" / (DB_FILE + "-wal")
    raw = bytearray(wal.read_bytes())
    raw[len(raw) // 3] ^= 0xFF  # SQLite's frame checksum makes recovery stop here
    wal.write_bytes(raw)
    with pytest.raises(StorageCorruptionError):
        _read_all(tmp_path / "crash")


def test_truncated_database_file_is_reported(tmp_path: Path):
    _write_and_snapshot(tmp_path / "data", None)
    db = tmp_path / "data" / DB_FILE
    os.truncate(db, db.stat().st_size // 2)
    with pytest.raises(StorageCorruptionError, match=r"magnetar\.db: truncated"):
        _read_all(tmp_path / "data")


def test_garbage_database_header_is_reported(tmp_path: Path):
    _write_and_snapshot(tmp_path / "data", None)
    db = tmp_path / "data" / DB_FILE
    with open(db, "r+b") as file:
        file.write(b"\x00" * 16)
    with pytest.raises(StorageCorruptionError, match=r"magnetar\.db"):
        _read_all(tmp_path / "data")


def test_corrupted_entry_bytes_fail_the_read_with_the_file_and_position(tmp_path: Path):
    _write_and_snapshot(tmp_path / "data", None)
    db = tmp_path / "data" / DB_FILE
    raw = bytearray(db.read_bytes())
    # Flip a bit in the padding of the first entry (blobs can span pages, so search, don't compute).
    offset = raw.index(MARKER)
    raw[offset + len(MARKER) + 10] ^= 0x01
    db.write_bytes(raw)
    with pytest.raises(StorageCorruptionError, match=r"magnetar\.db: segment \d+:\d+ .*checksum"):
        _read_all(tmp_path / "data")


def test_a_schema_version_1_database_keeps_its_crc32_checksums(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Databases made before segments were checksummed with CRC-32C are read, checked and appended
    to with zlib's CRC-32, which their segments carry."""
    with monkeypatch.context() as patch:
        patch.setattr(sqlite_engine, "SCHEMA_VERSION", 1)
        _write_and_snapshot(tmp_path / "data", None)
    db = tmp_path / "data" / DB_FILE
    with sqlite3.connect(db) as connection:
        # Version 1 rows are read as they are; it is version 4 now, which an older magnetar refuses.
        assert connection.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (4,)
        *parts, names, crc = connection.execute(
            "SELECT data, lengths, sticky_key_hashes, message_counts, publish_times, sequence_ids, "
            "producer_names, crc FROM segments"
        ).fetchone()
    zlib_crc = crc32c_crc = 0
    for part in [*parts, names.encode()]:
        zlib_crc, crc32c_crc = zlib.crc32(part, zlib_crc), crc32c.crc32c(part, crc32c_crc)
    assert crc == zlib_crc != crc32c_crc
    _write_and_snapshot(tmp_path / "data", None)
    assert _read_all(tmp_path / "data") == [MARKER + b"%05d" % (i % 50) + b"." * 300 for i in range(100)]
    raw = bytearray(db.read_bytes())
    raw[raw.index(MARKER) + len(MARKER) + 10] ^= 0x01
    db.write_bytes(raw)
    with pytest.raises(StorageCorruptionError, match=r"magnetar\.db: segment \d+:\d+ .*checksum"):
        _read_all(tmp_path / "data")


def test_a_schema_version_2_database_becomes_version_3_when_opened(tmp_path: Path):
    """Version 3 rows may store a constant column once; a magnetar that reads only versions 1 and 2
    must refuse the database rather than misread them (version 1 becomes 4, tested above)."""
    _write_and_snapshot(tmp_path / "data", None)
    db = tmp_path / "data" / DB_FILE
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE meta SET value=2 WHERE key='schema_version'")
    assert len(_read_all(tmp_path / "data")) == 50
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (3,)


def test_an_unknown_schema_version_is_refused_by_name(tmp_path: Path):
    _write_and_snapshot(tmp_path / "data", None)
    with sqlite3.connect(tmp_path / "data" / DB_FILE) as connection:
        connection.execute("UPDATE meta SET value=99 WHERE key='schema_version'")
    with pytest.raises(StorageError, match=r"magnetar\.db: schema version 99, this magnetar reads \[1, 2, 3, 4\]"):
        _read_all(tmp_path / "data")


def test_damaged_structure_is_caught_at_open(tmp_path: Path):
    _write_and_snapshot(tmp_path / "data", None)
    db = tmp_path / "data" / DB_FILE
    raw = bytearray(db.read_bytes())
    page_size = int.from_bytes(raw[16:18], "big")
    # Wreck one whole interior page of the database (not page 1, whose header is checked separately).
    raw[page_size * 2 : page_size * 3] = b"\xa5" * page_size
    db.write_bytes(raw)
    with pytest.raises(StorageCorruptionError, match=r"magnetar\.db"):
        _read_all(tmp_path / "data")


def test_missing_or_damaged_commit_seq_is_reported(tmp_path: Path):
    _write_and_snapshot(tmp_path / "data", None)
    sidecar = tmp_path / "data" / COMMIT_SEQ_FILE
    sidecar.write_bytes(b"\x07" * 12)
    with pytest.raises(StorageCorruptionError, match="commit-seq: checksum"):
        _read_all(tmp_path / "data")
    sidecar.unlink()
    with pytest.raises(StorageCorruptionError, match="commit-seq: missing"):
        _read_all(tmp_path / "data")


def test_a_second_process_cannot_open_the_same_directory(tmp_path: Path):
    async def main():
        factory = await ManagedLedgerFactory.open(str(tmp_path), CONFIG)
        try:
            with pytest.raises(StorageError, match="LOCK"):
                await ManagedLedgerFactory.open(str(tmp_path), CONFIG)
        finally:
            await factory.close()

    asyncio.run(main())


def test_disk_full_fails_appends_clearly_keeps_the_process_up_and_loses_nothing(tmp_path: Path):
    child = Path(__file__).with_name("disk_full_child.py")
    result = subprocess.run(
        [sys.executable, str(child), str(tmp_path / "data")], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(report["errors"]) == 3, report
    assert all("magnetar.db: commit failed" in error for error in report["errors"]), report["errors"]
    assert report["lost"] == [], f"completed appends lost: {report['lost']}"
    assert report["completed"] >= 20
    stored = _read_all(tmp_path / "data", "persistent://public/default/full")
    assert len(stored) == report["completed"] + 1 and stored[-1] == b"after"


def test_read_only_directory_gives_a_clear_error(tmp_path: Path):
    data = tmp_path / "data"
    _write_and_snapshot(data, None)
    for path in [data, *data.iterdir()]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    # root ignores permissions, so the opening process drops to nobody (after its imports, which
    # live where nobody may not read), and nobody must be able to reach the directory.
    for parent in [tmp_path, *tmp_path.parents]:
        if parent == Path(tempfile.gettempdir()):
            break
        parent.chmod(parent.stat().st_mode | 0o005)
    code = (
        "import asyncio, os, sys\n"
        "from magnetar.storage import ManagedLedgerFactory, StorageError\n"
        "if os.getuid() == 0: os.setuid(65534)\n"
        "async def main():\n"
        "    try:\n"
        f"        await ManagedLedgerFactory.open({str(data)!r})\n"
        "    except StorageError as error:\n"
        "        print('ERROR', error)\n"
        "asyncio.run(main())\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ERROR ") and str(data) in result.stdout, result.stdout
    assert "Permission denied" in result.stdout or "readonly" in result.stdout, result.stdout
    for path in [data, *data.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    assert len(_read_all(data)) == 50
