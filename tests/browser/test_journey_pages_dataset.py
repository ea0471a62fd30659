"""The dataset page with long text (issue 15, item 1), in a real Chromium: a 5,000-character one-line
prompt, an unbroken 1,500-character run inside it, a long unbroken answer and a 200-character name
all wrap inside the page; nothing makes it wider than the window, and no text is cut.

The dataset goes in through the upload page and the real worker's validation.
"""
from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]

WORDS = "Janet's ducks lay sixteen eggs per day and she eats three for breakfast every morning. "
PROMPT = (WORDS * 60)[:3400] + "x" * 1500 + (" " + WORDS * 2)[:100]
ANSWER = "9" * 400
NAME = "n" * 200


def test_long_prompt_lines_wrap_on_the_dataset_page(page_as, make_user, ui, tmp_path):
    assert len(PROMPT) == 5000 and "\n" not in PROMPT
    alice = make_user("alice")
    rows = [{"question": PROMPT, "answer": f"it is\n#### {ANSWER}"}, {"question": "What is 1+1?", "answer": "#### 2"}]
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = page_as(alice)
    ui.upload_dataset(page, path, name=NAME, timeout_ms=90_000)
    width = page.evaluate("window.innerWidth")
    assert width == 1280
    # The whole page, and every part of it, within the window's width (no horizontal scrolling).
    assert page.evaluate("document.scrollingElement.scrollWidth") <= width
    wide = page.evaluate("""(w) => [...document.querySelectorAll('main *')]
        .filter((el) => el.getBoundingClientRect().right > w + 1)
        .map((el) => el.tagName + '.' + el.className + ' ' + Math.round(el.getBoundingClientRect().right))""", width)
    assert wide == [], wide[:10]
    # Wrapped, not cut: the preview holds the whole prompt and the whole answer.
    texts = page.locator(".chat-row .msg pre").all_inner_texts()
    assert any(PROMPT in t for t in texts), [len(t) for t in texts]  # (the preset adds its instruction)
    prompt_box = page.locator(".chat-row .msg pre", has_text=PROMPT[:40]).first.bounding_box()
    assert prompt_box["height"] > 10 * 16, prompt_box  # many lines
    assert page.locator(".chat-row code", has_text=ANSWER).count() == 1
    assert page.locator("h1").inner_text() == NAME
    ui.shot(page, "pages-dataset-long-prompt")
    # The reward check's table keeps to the page too.
    with page.expect_navigation():
        page.click("button:has-text('Check on 3 rows')")
    page.wait_for_load_state("load")
    checks = page.locator("section.card:has(h2:has-text('Reward check')) table tbody tr")
    assert checks.count() > 0, (page.url, page.title(), page.locator("body").inner_text()[:3000])
    assert page.evaluate("document.scrollingElement.scrollWidth") <= width


def test_the_upload_pages_drop_target_is_a_box_and_its_sentence_one_line(page_as, make_user, shot):
    """/datasets/upload/: "Drop a file here or choose one." is one line inside a visible box (it was
    broken over three lines, "choose one" a block label like the form's others, with no box to drop on),
    and the box is outlined while a file is dragged over it."""
    alice = make_user("alice")
    page = page_as(alice)
    page.goto("/datasets/upload/")
    zone = page.locator("#dropzone")
    style = page.evaluate("""() => { const s = getComputedStyle(document.getElementById('dropzone'));
        return {style: s.borderTopStyle, width: parseFloat(s.borderTopWidth), colour: s.borderTopColor}; }""")
    assert style["style"] == "dashed" and style["width"] >= 1, style
    sentence = zone.locator("p").first
    link = sentence.locator("label.link")
    assert page.evaluate("getComputedStyle(document.querySelector('#dropzone label.link')).display") == "inline"
    line = page.evaluate("parseFloat(getComputedStyle(document.querySelector('#dropzone p')).lineHeight)")
    assert sentence.bounding_box()["height"] < 1.5 * line, sentence.bounding_box()
    assert sentence.inner_text().strip() == "Drop a file here or choose one."
    assert link.bounding_box()["y"] >= sentence.bounding_box()["y"]
    page.dispatch_event("#dropzone", "dragenter")
    over = page.evaluate("getComputedStyle(document.getElementById('dropzone')).borderTopColor")
    assert "over" in zone.get_attribute("class") and over != style["colour"]
    page.dispatch_event("#dropzone", "dragleave")
    shot(page, "pages-dataset-upload")
