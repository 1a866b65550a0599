"""Splitting a bundle over the admin API (`PUT /admin/v2/namespaces/{tenant}/{namespace}/{bundle}/split`,
as Pulsar's) and with `magnetar admin namespaces split-bundle`, at a broker of a cluster of one: built by
open_broker in this process with its admin server, on an in-memory metadata store."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import httpx

from cli.cli_runner import ok
from magnetar.broker.config import load_config
from magnetar.cli.standalone import Standalone
from magnetar.metadata.memory import MemoryMetadataServer

TIMEOUT_S = 30


def test_a_bundle_is_split_in_two_halves_at_its_owner(tmp_path: Path) -> None:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    config = load_config(overrides={"brokerServicePort": "0", "webServicePort": "0", "consoleEnabled": "false"})
    broker = Standalone(config, tmp_path / "data", MemoryMetadataServer().connect())
    asyncio.run_coroutine_threadsafe(broker.start(), loop).result(TIMEOUT_S)
    try:
        url = broker.broker.config.advertised_web_url
        bundles = f"{url}/admin/v2/namespaces/public/default/bundles"
        assert httpx.get(bundles).json()["numBundles"] == 4
        assert httpx.get(f"{url}/admin/v2/namespaces/public/default").json()["bundles"]["numBundles"] == 4
        refused = httpx.put(
            f"{url}/admin/v2/namespaces/public/default/0x00000000_0x40000000/split",
            params={"splitAlgorithmName": "topic_count_equally_divide"},
        )
        assert refused.status_code == 412
        assert "supported algorithms are ['range_equally_divide']" in refused.json()["reason"]
        admin = ["admin", "--admin-url", url, "namespaces"]
        ok(
            *admin,
            "split-bundle",
            "public/default",
            "--bundle",
            "0x00000000_0x40000000",
            "-san",
            "range_equally_divide",
        )
        halves = {
            "boundaries": ["0x00000000", "0x20000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
            "numBundles": 5,
        }
        assert httpx.get(bundles).json() == halves
        # The namespace's policies name the bundles it has now, as Pulsar's do.
        assert httpx.get(f"{url}/admin/v2/namespaces/public/default").json()["bundles"] == halves
        assert httpx.put(f"{url}/admin/v2/namespaces/public/default/0x00000000_0x40000000/split").status_code == 412
    finally:
        asyncio.run_coroutine_threadsafe(broker.stop(), loop).result(TIMEOUT_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(TIMEOUT_S)
