"""`magnetar admin topics compact|compaction-status` as subprocesses against a broker process."""

from __future__ import annotations

import time
import uuid

from cli_runner import fails, ok, ok_json

# How long the test waits for a compaction of a handful of entries.
COMPACTION_WAIT_S = 20


def test_compact_and_its_status(module_broker) -> None:
    topic = f"persistent://public/default/cli-{uuid.uuid4().hex[:10]}"
    admin = ["admin", "--admin-url", module_broker.http_url, "topics"]
    ok("produce", topic, "-m", "a,b", "--disable-batching", "--service-url", module_broker.url)
    assert ok_json(*admin, "compaction-status", topic) == {"status": "NOT_RUN", "lastError": ""}

    ok(*admin, "compact", topic)

    deadline = time.monotonic() + COMPACTION_WAIT_S
    status = ok_json(*admin, "compaction-status", topic)
    while status["status"] == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.1)
        status = ok_json(*admin, "compaction-status", topic)
    assert status == {"status": "SUCCESS", "lastError": ""}
    assert "not found" in fails(*admin, "compaction-status", "persistent://public/default/missing").lower()
