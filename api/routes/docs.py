"""/docs and /redoc served with no CDN: GPU nodes are often air-gapped, and FastAPI's default
pages fetch Swagger UI and ReDoc from the internet. The assets come from the ``fastapi-offline``
package (Swagger UI 5, which reads the OpenAPI 3.1 that FastAPI writes); the routes are ours."""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_URL = "/docs-assets"
ASSETS_DIR = Path(fastapi_offline.__file__).parent / "static"


def install(app: FastAPI, docs_url: str = "/docs", redoc_url: str = "/redoc") -> None:
    """Serve the docs pages and their assets from this process (the app has docs_url=None)."""
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS_DIR), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"
    redirect_url = app.swagger_ui_oauth2_redirect_url or "/docs/oauth2-redirect"

    @app.get(docs_url, include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - API docs",
            oauth2_redirect_url=redirect_url,
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
        )

    @app.get(redirect_url, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get(redoc_url, include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} - API reference",
            redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        )
