"""The web console: a page at `/` of the broker's HTTP port and the files it loads from `/console/`.

Owns: serving the console's own static files (HTML, CSS, JavaScript shipped as package data; nothing
is fetched from elsewhere, which the Content-Security-Policy header also enforces in the browser).
Must not touch: the broker. The pages read and change the broker only through the `/admin/v2` API and
`/metrics`, with the credentials the user gives them, so the security middleware checks every call as
it checks any other client's; the files served here hold no broker data.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.responses import Response
from starlette.exceptions import HTTPException

__all__ = ["ASSET_PREFIX", "mount"]

ASSET_PREFIX = "/console/"

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
}
# The browser may load nothing but these files and call nothing but this server: no CDN, no fonts, no
# inline script. Framing is refused so that the console's action buttons cannot be clickjacked.
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


def _assets() -> dict[str, tuple[bytes, str]]:
    """Every static file by name, read once: they are a few tens of kilobytes."""
    folder = resources.files(__package__).joinpath("static")
    return {
        item.name: (item.read_bytes(), _TYPES[item.name[item.name.rindex(".") :]])
        for item in folder.iterdir()
        if item.is_file() and item.name[item.name.rfind(".") :] in _TYPES
    }


def mount(app: FastAPI) -> None:
    """Add `/` and `/console/{name}` to the application (left out of the OpenAPI document)."""
    assets = _assets()
    index = assets["index.html"][0]

    @app.get("/", include_in_schema=False)
    async def console_page() -> Response:
        return Response(index, media_type=_TYPES[".html"], headers=_HEADERS)

    @app.get(ASSET_PREFIX + "{name}", include_in_schema=False)
    async def console_asset(name: str) -> Response:
        found = assets.get(name)
        if found is None:
            raise HTTPException(404, "Not Found")
        body, media_type = found
        return Response(body, media_type=media_type, headers=_HEADERS)
