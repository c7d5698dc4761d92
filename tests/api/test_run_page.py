"""The run page in a real headless browser (Debian's chromium driven by Playwright): the plot,
the best kernel and its diff, the notebook, the Temporal link, and no script injection from
kernel sources or notebook text (an LLM writes those)."""

from __future__ import annotations

import os

import pytest

from store import repository
from store.artifacts import put_text

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
HOSTILE = '</code></pre><script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
HOSTILE_SOURCE = f"def kernel(q, kv, scale):\n    # {HOSTILE}\n    return q\n"
HOSTILE_STRATEGY = "<script>window.__pwned = 3</script>split-K"


async def start_run(api) -> str:
    response = await api.http.post("/runs", json={"problem": "mla-decode", "goal": {"speedup": 2.0}})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def record_attempts(api, run_id: str) -> None:
    """Iteration 1: 1.1x and a failure; iteration 2: the hostile kernel at 1.6x, the best."""
    with api.db() as session:
        plain = put_text(session, "def kernel(q, kv, scale):\n    return q\n")
        hostile = put_text(session, HOSTILE_SOURCE)
        rows = [
            (1, 0, plain, "ok", 1.1, False, "tile-32"),
            (1, 1, plain, "incorrect", None, False, "tile-16"),
            (2, 0, hostile, "ok", 1.6, True, HOSTILE_STRATEGY),
        ]
        for iteration, index, sha, status, speedup, best, strategy in rows:
            repository.record_attempt(
                session,
                run_id=run_id,
                iteration=iteration,
                index=index,
                strategy=strategy,
                knobs=None,
                source_sha=sha,
                status=status,
                message=HOSTILE if status != "ok" else "",
                speedup=speedup,
                roofline=None,
                timing_kind="interpreter",
                report_sha=None,
                is_best=best,
                gpu_seconds=0.1,
            )


@pytest.fixture
async def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"chromium is not installed at {CHROMIUM} (apt-get install -y chromium)")
    playwright_api = pytest.importorskip(
        "playwright.async_api", reason="playwright is not installed (pip install playwright)"
    )
    async with playwright_api.async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        await browser.close()


async def test_page_raw_html_escapes_and_forbids_scripts(api):
    run_id = await start_run(api)
    record_attempts(api, run_id)
    response = await api.http.get(f"/runs/{run_id}/page")
    assert response.status_code == 200
    assert "script-src" not in response.headers["content-security-policy"]
    assert response.headers["content-security-policy"].startswith("default-src 'none'")
    assert "<script" not in response.text
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in response.text


async def test_page_without_token_shows_the_token_form(api):
    run_id = await start_run(api)
    response = await api.anonymous.get(f"/runs/{run_id}/page")
    assert response.status_code == 401
    assert '<form method="post" action="/login">' in response.text
    assert "speedup-plot" not in response.text


async def test_unknown_run_page_is_404(api):
    response = await api.http.get("/runs/ghost/page")
    assert response.status_code == 404
    assert "run ghost not found" in response.text


async def test_run_page_in_a_browser(api, browser):
    run_id = await start_run(api)
    record_attempts(api, run_id)
    await api.http.post(f"/runs/{run_id}/hints", json={"hint": "<i>use 8 warps</i>"})
    context = await browser.new_context(extra_http_headers={"Authorization": f"Bearer {api.token}"})
    page = await context.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))
    response = await page.goto(f"{api.base_url}/runs/{run_id}/page")
    assert response.status == 200

    plot = page.locator("#speedup-plot")
    assert await plot.is_visible()
    assert await page.locator("#speedup-plot circle.attempt").count() == 2
    assert await page.locator("#speedup-plot circle.failed").count() == 1
    assert await page.locator("#speedup-plot polyline.best-line").count() == 1
    assert await page.locator("#speedup-plot line.goal-line").count() == 1

    source = await page.locator("#best-source").inner_text()
    assert HOSTILE in source
    diff = page.locator("#best-diff .add")
    assert HOSTILE in "\n".join(await diff.all_inner_texts())
    assert await page.locator("#best-diff .del").count() > 0

    notebook = await page.locator("#notebook").inner_text()
    assert HOSTILE_STRATEGY in notebook
    assert "<b>tiles of 64</b> beat 32" in notebook
    assert "<i>use 8 warps</i>" in notebook

    assert await page.evaluate("typeof window.__pwned") == "undefined"
    assert await page.evaluate("document.querySelectorAll('script').length") == 0
    assert await page.evaluate("document.querySelectorAll('#best-source img, #notebook img').length") == 0
    assert dialogs == []

    link = page.locator("#temporal-link")
    assert await link.get_attribute("href") == f"http://temporal-ui.test:8233/namespaces/default/workflows/{run_id}"
    # While the workflow answers, its status query (the stand-in says 1.25x) wins over the store.
    assert await page.locator("#best-speedup").inner_text() == "1.250x"
    await context.close()


async def test_browser_signs_in_with_the_token_form(api, browser):
    run_id = await start_run(api)
    context = await browser.new_context()
    page = await context.new_page()
    response = await page.goto(f"{api.base_url}/runs/{run_id}/page")
    assert response.status == 401
    await page.fill("input[name=token]", "not-the-token")
    await page.click("button[type=submit]")
    assert "invalid API token" in await page.inner_text("body")
    await page.fill("input[name=token]", api.token)
    await page.click("button[type=submit]")
    await page.wait_for_selector("#speedup-plot")
    assert page.url == f"{api.base_url}/runs/{run_id}/page"
    cookies = await context.cookies()
    assert [c["httpOnly"] for c in cookies if c["name"] == "marathon_token"] == [True]
    await context.close()
