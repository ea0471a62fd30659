"""/models/ as a new user meets it (issue 15, item 2), in a real Chromium: the register form is on the
page (it once sat inside {% block title %}: never shown, its CSRF token in the <title>, its errors
only there); a refused registration shows the reason under the field it names and keeps what was typed.
"""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]

TITLE = "Models — RL Studio"


def _title_is_clean(page) -> None:
    assert page.title() == TITLE
    raw = page.evaluate("document.querySelector('head title').innerHTML")
    assert raw == TITLE and "csrf" not in page.evaluate("document.head.innerHTML").lower()
    assert page.locator("title").count() == 1 and page.locator("body title").count() == 0


def _just_below(page, field: str, error: str) -> None:
    """The error sits right under its field, and the field points at it (aria-describedby)."""
    box_f, box_e = page.locator(field).bounding_box(), page.locator(error).bounding_box()
    assert 0 <= box_e["y"] - (box_f["y"] + box_f["height"]) <= 30, (box_f, box_e)
    assert page.get_attribute(field, "aria-describedby") == error.lstrip("#")
    assert page.get_attribute(field, "aria-invalid") == "true"


def test_register_form_shows_and_errors_sit_by_their_field(page_as, make_user, shot):
    alice = make_user("alice")
    page = page_as(alice)
    page.goto("/models/")
    _title_is_clean(page)
    form = page.locator("#register-model form")
    assert form.is_visible()
    for field in ("#id_name", "#id_path", "#register-model button[type=submit]"):
        assert page.locator(field).is_visible(), field
    assert page.locator("#register-model .field-error, #register-error").count() == 0
    assert form.locator("input[name=csrfmiddlewaretoken]").count() == 1

    # A folder outside the model roots: refused, the reason under "Folder", the typed values kept.
    page.fill("#id_name", "my <model>")
    page.fill("#id_path", "/nowhere/near/a/model/root")
    with page.expect_navigation():
        page.click("#register-model button[type=submit]")
    _title_is_clean(page)
    error = page.locator("#id_path_error")
    assert error.is_visible() and "RLSTUDIO_MODEL_ROOTS" in error.inner_text(), page.content()[:3000]
    _just_below(page, "#id_path", "#id_path_error")
    assert page.input_value("#id_path") == "/nowhere/near/a/model/root"
    assert page.input_value("#id_name") == "my <model>"
    assert page.locator("#id_name_error, #register-error").count() == 0
    shot(page, "pages-models-register-error")

    # A relative folder: its own reason, in the same place.
    page.fill("#id_path", "relative/folder")
    with page.expect_navigation():
        page.click("#register-model button[type=submit]")
    assert page.locator("#id_path_error").inner_text() == "the path must be absolute"
    _just_below(page, "#id_path", "#id_path_error")
    _title_is_clean(page)
    from rlstudio.catalog.models import ModelAsset

    assert not ModelAsset.objects.exists()
