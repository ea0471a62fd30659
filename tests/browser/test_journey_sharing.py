"""Journey: staff shares a model from the Models page; a second, ordinary user then sees it (marked
shared, read-only) on /models/ and can pick it in the new-run form (a real Chromium, the real server)."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_a_model_staff_shares_appears_for_another_user_read_only(page_as, make_user, register_model, ui):
    from rlstudio.catalog.models import ModelAsset

    root, bob = make_user("root", staff=True), make_user("bob")
    model = register_model(root, "team-model")

    other = page_as(bob)
    other.goto("/models/")
    assert "team-model" not in other.content()  # private until shared

    admin = page_as(root)
    admin.goto("/models/")
    row = admin.locator(f"tr[data-model-id='{model.pk}']")
    row.get_by_role("button", name="Share with everyone").click()
    admin.wait_for_url("**/models/")
    assert "team-model is now shared with everyone." in admin.content()
    assert ModelAsset.objects.get(pk=model.pk).visibility == "everyone"

    other.goto("/models/")
    row = other.locator(f"tr[data-model-id='{model.pk}']")
    assert "shared" in row.inner_text() and "read-only" in row.inner_text() and "root" in row.inner_text()
    assert row.get_by_role("button").count() == 0  # no delete, no share control for bob
    ui.shot(other, "sharing-models-second-user")
    other.goto("/runs/new/")
    options = other.locator("select[name=model] option").all_inner_texts()
    assert any(o.startswith("team-model (") for o in options), options
