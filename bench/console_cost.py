"""What the web console costs the broker: its CPU with and without the Key_Shared subscription page open.

One broker (defaults). A load process publishes `--rate` 100-byte messages per second to 1,000 keys on
one topic, and `--consumers` Key_Shared consumers of one subscription acknowledge them in listeners
(its own process, so that the client's threads do not share this one's GIL). Once the rates settle,
alternating windows of `--window` seconds measure the broker's CPU (utime + stime from /proc):
headless Chromium (the distribution's, as tests/console uses) on about:blank, then on the console's
subscription page of that topic, the page that reads the most (stats, internalStats, the ring) every
two seconds. The difference is the page's cost; the spread of the windows says how much of it is noise.
Prints a table and writes bench/results/console_cost.json.

    python bench/console_cost.py [--rate 2000] [--consumers 4] [--window 20] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from broker_process import Broker, cpu_seconds, load_line, machine

RESULTS = Path(__file__).parent / "results"
TOPIC = "persistent://public/default/console-cost"
SUBSCRIPTION = "workers"
KEYS = 1000
PAYLOAD = b"x" * 100


def load(url: str, rate: int, consumers: int, stop: multiprocessing.Event) -> None:
    """Publishes at `rate` per second in 10 ms slices until `stop`; consumers ack in listeners."""
    import pulsar

    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    for index in range(consumers):
        client.subscribe(
            TOPIC,
            SUBSCRIPTION,
            consumer_type=pulsar.ConsumerType.KeyShared,
            consumer_name=f"c{index}",
            message_listener=lambda consumer, message: consumer.acknowledge(message),
        )
    producer = client.create_producer(TOPIC, block_if_queue_full=True, batching_enabled=False)
    per_slice = max(1, rate // 100)
    sent = 0
    started = time.monotonic()
    while not stop.is_set():
        for _ in range(per_slice):
            producer.send_async(PAYLOAD, None, partition_key=f"key-{sent % KEYS}")
            sent += 1
        ahead_s = sent / rate - (time.monotonic() - started)
        if ahead_s > 0:
            time.sleep(ahead_s)
    producer.flush()
    client.close()


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))


def window(broker: Broker, seconds: float) -> float:
    """The broker's CPU over `seconds`, in percent of one core."""
    before, started = cpu_seconds(broker.pid), time.monotonic()
    time.sleep(seconds)
    return 100 * (cpu_seconds(broker.pid) - before) / (time.monotonic() - started)


def refresh_cost(broker: Broker, seconds: float, baseline_percent: float) -> tuple[float, int]:
    """The broker's CPU milliseconds per refresh of the subscription page: its two reads (stats and
    internalStats) made back to back for `seconds`, less what the load costs in that time."""
    import httpx

    base = f"{broker.http_url}/admin/v2/persistent/public/default/console-cost"
    count = 0
    before, started = cpu_seconds(broker.pid), time.monotonic()
    with httpx.Client(timeout=10) as http:
        while time.monotonic() - started < seconds:
            http.get(f"{base}/stats").raise_for_status()
            http.get(f"{base}/internalStats").raise_for_status()
            count += 1
    elapsed = time.monotonic() - started
    spent_s = cpu_seconds(broker.pid) - before - baseline_percent / 100 * elapsed
    return 1000 * spent_s / count, count


def refreshes(driver) -> int:
    return int(driver.execute_script("return Number(document.body.dataset.refreshes || 0)"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=2000, help="messages published per second")
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--window", type=float, default=20.0, help="seconds per measured window")
    parser.add_argument("--runs", type=int, default=3, help="pairs of windows (without, with the page)")
    args = parser.parse_args()
    before = machine()
    with tempfile.TemporaryDirectory() as tmp:
        broker = Broker(Path(tmp) / "data")
        broker.start()
        stop = multiprocessing.Event()
        loader = multiprocessing.Process(target=load, args=(broker.url, args.rate, args.consumers, stop))
        loader.start()
        driver = browser()
        page = f"{broker.http_url}/#/sub/persistent/public/default/console-cost/{SUBSCRIPTION}"
        without: list[float] = []
        with_page: list[float] = []
        polls = 0
        try:
            time.sleep(5)  # the consumers connected, the rates steady
            for run in range(args.runs):
                driver.get("about:blank")
                without.append(window(broker, args.window))
                driver.get(page)
                time.sleep(3)  # the page loaded and drew its first refresh
                first = refreshes(driver)
                with_page.append(window(broker, args.window))
                polls += refreshes(driver) - first
                print(f"run {run + 1}: without {without[-1]:.1f} %, with the page {with_page[-1]:.1f} %", flush=True)
            per_refresh_ms, back_to_back = refresh_cost(broker, args.window, statistics.mean(without))
            stats = driver.execute_script(
                "return fetch(arguments[0]).then(r => r.json())",
                f"{broker.http_url}/admin/v2/persistent/public/default/console-cost/stats",
            )
        finally:
            driver.quit()
            stop.set()
            loader.join(30)
            broker.stop()
    after = machine()
    mean_without, mean_with = statistics.mean(without), statistics.mean(with_page)
    report = {
        "machine": before,
        "rate_per_s": args.rate,
        "consumers": args.consumers,
        "window_s": args.window,
        "runs": args.runs,
        "measured_rate_in_per_s": stats["msgRateIn"],
        "measured_rate_out_per_s": stats["msgRateOut"],
        "cpu_percent_without_page": without,
        "cpu_percent_with_page": with_page,
        "page_refreshes_per_s": polls / (args.window * args.runs),
        "page_cost_percent_of_a_core": mean_with - mean_without,
        "refresh_cpu_ms": per_refresh_ms,
        "refreshes_back_to_back": back_to_back,
        "page_cost_percent_of_a_core_from_refresh_cost": per_refresh_ms
        / 1000
        * 100
        * polls
        / (args.window * args.runs),
        "load_after": after["loadavg"],
    }
    print()
    print(f"{'broker CPU (% of a core)':<28}{'mean':>8}{'min':>8}{'max':>8}")
    for label, values in (("without the page", without), ("with the page", with_page)):
        print(f"{label:<28}{statistics.mean(values):>8.1f}{min(values):>8.1f}{max(values):>8.1f}")
    print(f"{'the page costs':<28}{mean_with - mean_without:>8.1f}")
    print(
        f"{'one refresh, back to back':<28}{per_refresh_ms:>8.2f} ms of broker CPU ({back_to_back} refreshes): "
        f"{report['page_cost_percent_of_a_core_from_refresh_cost']:.2f} % of a core at the page's pace"
    )
    print(
        f"\n{args.rate} msg/s asked, {stats['msgRateIn']:.0f} in and {stats['msgRateOut']:.0f} out measured; "
        f"{report['page_refreshes_per_s']:.2f} page refreshes per second; {before['nproc']} × {before['cpu']}; "
        f"{load_line(before, after)}"
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "console_cost.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
