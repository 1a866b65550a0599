"""CPU per SEND of the broker's frame reading (`FrameDecoder.receive_frames_and_sends`), in isolation.

One socket read of 64 KB holds about 250 SENDs of 100 B messages with their metadata; the decoder splits
the read into frames and reads each SEND's fields, by hand for the usual shape. Three shapes of CommandSend:
a single message (producer id, sequence id), one with `num_messages` as the official clients write it,
and a batch (`num_messages` and `highest_sequence_id`). For scale, the same reads through
`receive_data`, which parses every command with protobuf, then reading the three fields the broker
reads from each (what the broker did before it read SENDs by hand). Each row is the median of `--repeats` runs
of `--reads` reads (process CPU time, so the machine's other load counts less than in wall time).
Prints a table; writes bench/results/protocol_sends.json.

    python bench/protocol_sends.py [--reads 2000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from functools import partial
from pathlib import Path

from magnetar.client.batch import entry_section
from magnetar.protocol.framing import FrameDecoder, encode_frame
from magnetar.protocol.pulsar_api_pb2 import BaseCommand

SENDS_PER_READ = 250
PAYLOAD_BYTES = 100
RESULTS = Path(__file__).parent / "results" / "protocol_sends.json"

SHAPES = {
    "single": lambda sequence: {"producer_id": 3, "sequence_id": sequence},
    "num_messages": lambda sequence: {"producer_id": 3, "sequence_id": sequence, "num_messages": 1},
    "batch": lambda sequence: {
        "producer_id": 3,
        "sequence_id": sequence,
        "num_messages": 10,
        "highest_sequence_id": sequence + 9,
    },
}


def socket_read(shape: str) -> bytes:
    """SENDS_PER_READ SEND frames of one producer, sequence ids from 1,000,000 (three-byte varints)."""
    fields = SHAPES[shape]
    frames = []
    for index in range(SENDS_PER_READ):
        sequence = 1_000_000 + index
        section = entry_section("bench-producer", sequence, bytes(PAYLOAD_BYTES), 1_700_000_000_000, key=f"key-{index}")
        frames.append(encode_frame(BaseCommand(type=BaseCommand.SEND, send=fields(sequence)), section))
    return b"".join(frames)


def read_by_protobuf(decoder: FrameDecoder, data: bytes) -> list:
    sends = [frame.command.send for frame in decoder.receive_data(data)]
    return [(send.producer_id, send.sequence_id, send.highest_sequence_id) for send in sends]


def cpu_per_send_us(data: bytes, by_hand: bool, reads: int) -> float:
    decoder = FrameDecoder()
    receive = decoder.receive_frames_and_sends if by_hand else partial(read_by_protobuf, decoder)
    assert len(receive(data)) == SENDS_PER_READ
    started = time.process_time()
    for _ in range(reads):
        receive(data)
    return (time.process_time() - started) / (reads * SENDS_PER_READ) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reads", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    rows = []
    for shape in SHAPES:
        data = socket_read(shape)
        for by_hand in (True, False):
            runs = [cpu_per_send_us(data, by_hand, args.reads) for _ in range(args.repeats)]
            rows.append(
                {
                    "shape": shape,
                    "reader": "receive_frames_and_sends" if by_hand else "protobuf + fields",
                    "us_per_send_median": round(statistics.median(runs), 4),
                    "us_per_send_min": round(min(runs), 4),
                    "runs": [round(run, 4) for run in runs],
                }
            )
    print(f"{SENDS_PER_READ} SENDs of {PAYLOAD_BYTES} B per read; CPU µs per SEND, median (min) of {args.repeats}")
    print(f"{'shape':<14} {'reader':<26} {'median':>8} {'min':>8}")
    for row in rows:
        print(
            f"{row['shape']:<14} {row['reader']:<26} {row['us_per_send_median']:>8.3f} {row['us_per_send_min']:>8.3f}"
        )
    RESULTS.parent.mkdir(exist_ok=True)
    out = {
        "machine": platform.platform(),
        "python": platform.python_version(),
        "sends_per_read": SENDS_PER_READ,
        "payload_bytes": PAYLOAD_BYTES,
        "rows": rows,
    }
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
