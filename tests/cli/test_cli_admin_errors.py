"""`magnetar admin` when the answer is not Pulsar's JSON error: the web server's HTML page for a caller
without credentials, another program's page at the admin URL. One line with the status, never the page."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cli_runner import fails, ok

TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"


class _OtherServer(BaseHTTPRequestHandler):
    """Some other web application on the port: its own HTML 404 page for every path."""

    def do_GET(self) -> None:
        page = (
            b"<!DOCTYPE html>\n<html>\n<head><title>Page not found - Acme wiki</title></head>\n<body>\n"
            + (b"<p>Nothing here.</p>\n" * 10)
            + b"</body>\n</html>\n"
        )
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reads the command's output, not the server's."""


@pytest.fixture
def other_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OtherServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_no_credentials_is_one_line_with_the_status(broker_factory, tmp_path) -> None:
    secret = tmp_path / "secret.key"
    ok("tokens", "create-secret-key", "--output", str(secret))
    broker = broker_factory(
        authenticationEnabled="true", authenticationProviders=TOKEN_PROVIDER, tokenSecretKey=f"file://{secret}"
    )
    stderr = fails("admin", "--admin-url", broker.http_url, "tenants", "list")
    assert stderr == "magnetar: HTTP 401 Unauthorized: Authentication required\n"


def test_another_servers_page_is_one_line_that_questions_the_url(other_server: str) -> None:
    stderr = fails("admin", "--admin-url", other_server, "tenants", "list")
    assert stderr == (
        f"magnetar: HTTP 404 Not Found: Page not found - Acme wiki ({other_server}/admin/v2/tenants is not a "
        "path of Pulsar's admin API: is the admin URL a magnetar or Pulsar broker?)\n"
    )
