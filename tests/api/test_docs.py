"""/docs and /redoc work on an air-gapped node: every asset comes from the API itself."""

from __future__ import annotations

import re

from tests.api.test_run_page import browser  # noqa: F401  (fixture)


async def test_docs_pages_reference_only_local_assets(bare_api):
    for path, asset in (("/docs", "/docs-assets/swagger-ui-bundle.js"), ("/redoc", "/docs-assets/redoc.standalone.js")):
        page = await bare_api.anonymous.get(path)
        assert page.status_code == 200, path
        sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        assert asset in sources, (path, sources)
        assert not [s for s in sources if s.startswith(("http:", "https:", "//"))], (path, sources)
        script = await bare_api.anonymous.get(asset)
        assert script.status_code == 200 and "javascript" in script.headers["content-type"]
        assert len(script.content) > 100_000  # the real bundle, not a placeholder
    missing = await bare_api.anonymous.get("/docs-assets/nothing.js")
    assert missing.status_code == 404


async def test_swagger_ui_renders_with_the_network_cut_off(bare_api, browser):  # noqa: F811
    context = await browser.new_context()
    page = await context.new_page()
    outside = []

    async def only_local(route):
        if route.request.url.startswith(bare_api.base_url):
            await route.continue_()
        else:
            outside.append(route.request.url)
            await route.abort()

    await page.route("**/*", only_local)
    await page.goto(f"{bare_api.base_url}/docs")
    await page.wait_for_selector(".swagger-ui .info .title", timeout=30_000)
    assert "Marathon" in await page.inner_text(".swagger-ui .info .title")
    await page.wait_for_selector('.opblock-summary-path[data-path="/runs/{run_id}/pause"]', timeout=30_000)
    assert outside == []
    await context.close()


def test_every_route_but_the_health_check_is_marked_as_needing_the_token():
    """The run page and an attempt's LLM exchange check the token themselves (they also take the
    page's cookie); the docs must still say they need it."""
    from api.main import create_app

    spec = create_app().openapi()
    open_routes = [
        f"{method.upper()} {path}" for path, operations in spec["paths"].items()
        for method, operation in operations.items() if not operation.get("security")
    ]
    assert open_routes == ["GET /healthz"]
