"""The leader's requests to a bundle's owner over its admin API (owner_admin.py), against a stand-in
HTTP server on loopback: the paths and query Pulsar's admin client sends, the broker's client
credentials, and a refusal raised."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from magnetar.broker.cluster.brokers import LocalBrokerData
from magnetar.broker.cluster.bundles import Bundle
from magnetar.broker.cluster.owner_admin import OwnerAdmin, OwnerAdminError
from magnetar.broker.config import load_config

BUNDLE = Bundle("public/default", 0, 0x40000000)


class _Owner(BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str, str | None]]] = []

    def do_PUT(self) -> None:
        _Owner.seen.append((self.command, self.path, self.headers.get("Authorization")))
        self.send_response(204 if "0x00000000" in self.path else 412)
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def owner() -> Iterator[LocalBrokerData]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Owner)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    _Owner.seen = []
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        yield LocalBrokerData(url, None, "pulsar://127.0.0.1:6650", None)
    finally:
        server.shutdown()
        thread.join()


def test_the_owner_is_asked_to_unload_and_split_with_the_brokers_credentials(owner: LocalBrokerData) -> None:
    config = load_config(
        overrides={
            "authenticationEnabled": "true",
            "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
            "brokerClientAuthenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
            "brokerClientAuthenticationParameters": "token:secret",
        }
    )
    admin = OwnerAdmin(config)
    asyncio.run(admin.unload(owner, BUNDLE))
    asyncio.run(admin.split(owner, BUNDLE, unload=True))
    assert _Owner.seen == [
        ("PUT", "/admin/v2/namespaces/public/default/0x00000000_0x40000000/unload", "Bearer secret"),
        ("PUT", "/admin/v2/namespaces/public/default/0x00000000_0x40000000/split?unload=true", "Bearer secret"),
    ]
    with pytest.raises(OwnerAdminError, match="412"):
        asyncio.run(OwnerAdmin(load_config()).split(owner, Bundle("public/default", 0x40000000, 0x80000000), False))
    assert _Owner.seen[-1] == (
        "PUT",
        "/admin/v2/namespaces/public/default/0x40000000_0x80000000/split?unload=false",
        None,
    )
