"""/api/v1/docs/ in a real Chromium: every operation's path is one line (the table's code cells break
anywhere, which cut paths mid-name: "/api/v1/alerts /notifications /"), and the table still fits the
window, the summaries taking the width that is left."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_paths_are_whole_lines_and_the_page_fits(page_as, make_user, shot):
    page = page_as(make_user("alice"))
    page.goto("/api/v1/docs/")
    lines = page.evaluate("""() => [...document.querySelectorAll('table.api-ops td.op-path code')]
        .map((c) => [c.textContent, c.getClientRects().length])""")
    assert len(lines) > 50, lines[:3]
    assert [p for p, n in lines if n != 1] == []
    assert page.evaluate("document.scrollingElement.scrollWidth") <= page.evaluate("window.innerWidth")
    shot(page, "api-docs-page")
