"""Every page says where you are and none asks for a missing icon (issue 15, item 10), in a real
Chromium: each main page's <title> is its own ("Run #12 · <name> — RL Studio", "Datasets — RL
Studio", ...), every page links the site's icon, /favicon.ico answers (for the pages that link none:
the admin's, the API's own), and loading the pages meets no 4xx or 5xx answer but the 404 page's own.
"""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]

ICON_LINKS = "[...document.querySelectorAll('link[rel~=icon]')].map((l) => l.href)"


def test_titles_are_specific_and_the_favicon_is_found(page_as, make_user, services, browser, shot):
    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.services import run_create

    alice = make_user("alice", staff=True)
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    dataset = Dataset.objects.create(owner=alice, name="gsm8k-small", file_path="/tmp/d.jsonl", sha256="0" * 64,
                                     status="invalid", error="not a real file")
    model = ModelAsset.objects.create(owner=alice, name="m", path="/tmp/m")
    run, _ = run_create(owner=alice, name="grpo-titles", dataset=dataset, model=model, config={}, gpus=0)

    page = page_as(alice)
    bad: list[str] = []
    icon_requests: list[str] = []

    def seen(response):
        if "favicon" in response.url:
            icon_requests.append(f"{response.status} {response.url}")
        if response.status >= 400 and not response.url.endswith("/no-such-page/"):
            bad.append(f"{response.status} {response.url}")

    page.on("response", seen)
    expected = {
        "/runs/": "Runs — RL Studio",
        "/runs/new/": "New run — RL Studio",
        "/runs/quota/": "Quota — RL Studio",
        f"/runs/{run.pk}/": f"Run #{run.pk} · grpo-titles — RL Studio",
        "/datasets/": "Datasets — RL Studio",
        "/datasets/upload/": "Upload a dataset — RL Studio",
        f"/datasets/{dataset.pk}/": f"Dataset #{dataset.pk} · gsm8k-small — RL Studio",
        "/models/": "Models — RL Studio",
        "/accounts/profile/": "Profile — RL Studio",
        "/api/v1/docs/": "API — RL Studio",
        "/no-such-page/": "Page not found — RL Studio",
    }
    titles = {}
    icons = set()
    for path in expected:
        page.goto(path)
        page.wait_for_load_state("load")
        titles[path] = page.title()
        links = page.evaluate(ICON_LINKS)
        assert links, f"{path} links no icon"
        icons.update(links)
    assert titles == expected
    assert len(set(titles.values())) == len(titles)  # no two pages alike
    page.goto("/admin/")  # Django's admin links no icon: the browser asks for /favicon.ico
    page.wait_for_load_state("load")
    page.wait_for_timeout(500)
    assert bad == [], bad

    # The icons the pages link, and /favicon.ico, answer with images.
    for url in sorted(icons):
        answer = page.request.get(url)
        assert answer.status == 200 and answer.headers["content-type"].startswith("image/"), (url, answer.headers)
    answer = page.request.get("/favicon.ico")
    assert answer.status == 200 and answer.url.endswith("/static/favicon.ico"), answer.url
    assert answer.headers["content-type"] in ("image/x-icon", "image/vnd.microsoft.icon")
    assert answer.body()[:4] == b"\x00\x00\x01\x00"  # an ICO file
    svg = page.request.get("/static/favicon.svg")
    assert svg.headers["content-type"].startswith("image/svg+xml") and b"<svg" in svg.body()
    assert all(not r.startswith("4") for r in icon_requests), icon_requests
    print("favicon requests the browser made:", icon_requests)

    # Logged out: the login page says so too.
    ctx = browser.new_context(base_url=services["base"])
    try:
        anon = ctx.new_page()
        anon.goto("/accounts/login/")
        assert anon.title() == "Log in — RL Studio"
        assert anon.evaluate(ICON_LINKS)
    finally:
        ctx.close()
