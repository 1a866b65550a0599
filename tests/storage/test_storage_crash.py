"""SIGKILL a process that appends from many concurrent writers and acks, many times over.

Each round starts `crash_child.py`, which first verifies everything earlier rounds reported (see its
docstring for the checks), then works until this test kills it at a random moment. The last round
only verifies. `MAGNETAR_STORAGE_CRASH_ROUNDS` (default 20) sets the number of kills and
`MAGNETAR_STORAGE_CRASH_SEED` replays a run; a failure prints both.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

CHILD = Path(__file__).with_name("crash_child.py")
ROUNDS = int(os.environ.get("MAGNETAR_STORAGE_CRASH_ROUNDS", "20"))
# A child that neither verifies nor fails within this long is hung, which is a failure too.
STARTUP_SECONDS_MAX = 60


def _run_child(tmp_path: Path, facts: dict, round_: int, seed: int, mode: str) -> tuple[subprocess.Popen, Path]:
    facts_path = tmp_path / "facts.json"
    facts_path.write_text(json.dumps(facts))
    out_path = tmp_path / f"out-{round_}.txt"
    process = subprocess.Popen(
        [
            sys.executable,
            str(CHILD),
            str(tmp_path / "data"),
            str(facts_path),
            str(out_path),
            str(round_),
            str(seed),
            mode,
        ],
        stderr=subprocess.PIPE,
    )
    return process, out_path


def _wait_verified(process: subprocess.Popen, out_path: Path, context: str) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS_MAX
    while time.monotonic() < deadline:
        text = out_path.read_text() if out_path.exists() else ""
        if "FAIL " in text:
            process.kill()
            process.wait()
            raise AssertionError(f"{context}: {text[text.index('FAIL ') :].strip()}")
        if "VERIFIED" in text:
            return
        if process.poll() is not None:
            raise AssertionError(f"{context}: child exited {process.returncode}: {process.stderr.read().decode()}")
        time.sleep(0.01)
    process.kill()
    raise AssertionError(f"{context}: child did not verify within {STARTUP_SECONDS_MAX}s")


def _absorb(out_path: Path, facts: dict, round_: int) -> int:
    text = out_path.read_text()
    lines = text.split("\n")[:-1]  # the last piece is empty or a line the kill tore
    appends = 0
    for line in lines:
        kind, *rest = line.split()
        if kind == "A":
            topic, ledger_id, entry_id, writer, seq = rest
            facts["completed"].setdefault(topic, []).append(
                [int(ledger_id), int(entry_id), round_, int(writer), int(seq)]
            )
            appends += 1
        elif kind == "I":
            topic, ledger_id, entry_id = rest
            facts["intents"].setdefault(topic, []).append([int(ledger_id), int(entry_id)])
        elif kind == "C":
            topic, ledger_id, entry_id = rest
            position = [int(ledger_id), int(entry_id)]
            facts["cumulative"][topic] = max(facts["cumulative"].get(topic, [-1, -1]), position)
        elif kind == "P":
            topic, ledger_id, entry_id = rest
            position = [int(ledger_id), int(entry_id)]
            facts["persisted"][topic] = max(facts["persisted"].get(topic, [-1, -1]), position)
    return appends


def test_sigkill_many_times_loses_no_completed_append_and_no_cursor_position(tmp_path: Path) -> None:
    seed = int(os.environ.get("MAGNETAR_STORAGE_CRASH_SEED", random.randrange(2**32)))
    generator = random.Random(seed)
    facts: dict = {"completed": {}, "intents": {}, "cumulative": {}, "persisted": {}}
    completed = 0
    for round_ in range(ROUNDS):
        context = f"round {round_} (reproduce with MAGNETAR_STORAGE_CRASH_SEED={seed})"
        process, out_path = _run_child(tmp_path, facts, round_, seed, "work")
        _wait_verified(process, out_path, context)
        time.sleep(generator.uniform(0.02, 0.6))
        process.send_signal(signal.SIGKILL)
        process.wait()
        assert process.returncode == -signal.SIGKILL, (
            f"{context}: child ended by itself: {process.stderr.read().decode()}"
        )
        completed += _absorb(out_path, facts, round_)
    process, out_path = _run_child(tmp_path, facts, ROUNDS, seed, "verify")
    _wait_verified(process, out_path, f"final check (reproduce with MAGNETAR_STORAGE_CRASH_SEED={seed})")
    assert process.wait(timeout=STARTUP_SECONDS_MAX) == 0, process.stderr.read().decode()
    # The kills must have landed while work was going on, or the test proves nothing.
    assert completed > ROUNDS * 10, f"only {completed} appends completed in {ROUNDS} rounds"
    assert facts["persisted"], "no cursor flush completed in any round"
