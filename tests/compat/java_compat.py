"""The Java compatibility program (compat/java) as the tests drive it: one JVM for the whole run, one
scenario per request line, one JSON report per answer line.

Built by `make compat` (which `make test` runs first); a missing build is an error, not a skip, because
the suite is part of what `make test` proves.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "compat" / "java"
CLASSPATH_FILE = BUILD / "classpath.txt"
# Longer than the program's own limit per scenario (60 s), so that its report of a stuck scenario arrives.
ANSWER_TIMEOUT_S = 90


class JavaCompatError(AssertionError):
    """A scenario threw, or the JVM stopped answering; the message carries the JVM's log of the scenario."""


class JavaCompat:
    def __init__(self, log_path: Path) -> None:
        if not CLASSPATH_FILE.exists():
            raise RuntimeError(f"{CLASSPATH_FILE} is missing: run `make compat` (make test does) to build compat/java")
        classpath = f"{BUILD / 'classes'}:{CLASSPATH_FILE.read_text().strip()}"
        self.log_path = log_path
        # The JVM writes its log to its own copy of the descriptor: ours is closed once it is started.
        with open(log_path, "w") as log:
            self.process = subprocess.Popen(
                # Two cores are shared by the whole test run: a small heap and the client compiler only.
                [
                    "java",
                    "-Xmx256m",
                    "-XX:TieredStopAtLevel=1",
                    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                    "-cp",
                    classpath,
                    "dev.magnetar.compat.Compat",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        self._answers: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read_answers, daemon=True).start()
        self.scenarios = self._answer("start")["scenarios"]

    def _read_answers(self) -> None:
        for line in self.process.stdout:
            self._answers.put(line)
        self._answers.put(None)

    def _answer(self, scenario: str) -> dict[str, Any]:
        try:
            line = self._answers.get(timeout=ANSWER_TIMEOUT_S)
        except queue.Empty:
            raise JavaCompatError(f"no answer to {scenario} in {ANSWER_TIMEOUT_S} s\n{self.log_tail()}") from None
        if line is None:
            raise JavaCompatError(f"the JVM exited ({self.process.poll()}) during {scenario}\n{self.log_tail()}")
        report = json.loads(line)
        if not report["ok"]:
            raise JavaCompatError(f"{scenario}: {report['error']}\n{self.log_tail()}")
        return report["result"]

    def run(self, scenario: str, **args: Any) -> dict[str, Any]:
        """Run one scenario and return what the Java client observed; raise if it threw."""
        self.process.stdin.write(json.dumps({"scenario": scenario, **args}) + "\n")
        self.process.stdin.flush()
        return self._answer(scenario)

    def log_tail(self, lines: int = 60) -> str:
        text = self.log_path.read_text().splitlines()
        return "JVM log (tail):\n" + "\n".join(text[-lines:])

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
