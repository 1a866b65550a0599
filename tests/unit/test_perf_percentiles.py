"""`magnetar perf`'s percentiles: a batch's latency counts once per message it carried, as if each
message had its own sample, without building that list."""

from __future__ import annotations

from array import array

from hypothesis import given
from hypothesis import strategies as st

from magnetar.client.perf import percentiles

latencies = st.floats(min_value=0, max_value=1e4, allow_nan=False)


@given(st.lists(st.tuples(latencies, st.integers(min_value=1, max_value=200)), min_size=1, max_size=300))
def test_counted_samples_give_the_percentiles_of_the_samples_repeated(pairs: list[tuple[float, int]]) -> None:
    samples = array("d", (latency for latency, _ in pairs))
    counts = array("q", (count for _, count in pairs))
    repeated = [latency for latency, count in pairs for _ in range(count)]
    assert percentiles(samples, counts) == percentiles(repeated)


def test_nearest_rank_on_a_known_distribution() -> None:
    # 1,000 messages: 990 at 1 ms in one batch, then 9 at 5 ms and one at 50 ms, each alone.
    samples = array("d", [1.0] + [5.0] * 9 + [50.0])
    counts = array("q", [990] + [1] * 10)
    assert percentiles(samples, counts) == {"p50": 1.0, "p99": 5.0, "p99_9": 50.0, "max": 50.0}


def test_no_samples_are_all_zero() -> None:
    assert percentiles(array("d"), array("q")) == {"p50": 0.0, "p99": 0.0, "p99_9": 0.0, "max": 0.0}
