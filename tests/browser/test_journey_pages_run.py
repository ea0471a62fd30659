"""The live run page as a new user meets it (issue 15, items 5 and 7), in a real Chromium:

- the memory timeline draws its phase bands (rollout, old log-prob, ref, update, sync) behind the
  lines, one band per stretch of a phase, in the legend's colours and wide enough to see;
- the samples table shows each sample's prompt text (shortened, the whole text in its title), newest
  step first, the prompt's uid on a second line; a prompt that looks like HTML is shown as text; a
  sample reported while the page is open comes in at the top, with its prompt.

The run is never admitted (no quota): only the real ingest endpoint writes to it.
"""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]

T0 = 1_764_440_000.0
# (phase, seconds after T0) for rank 0: six stretches (rollout comes back for step 2); the reference's
# 10 ms are less than a pixel of the ~10 s shown.
MEMORY = [("rollout", 0), ("rollout", 1), ("rollout", 2), ("old_log_prob", 3), ("ref", 4), ("update", 4.01),
          ("update", 6), ("sync", 7), ("rollout", 8), ("rollout", 9)]
BANDS = [("rollout", "rgb(78, 121, 167)"), ("old_log_prob", "rgb(242, 142, 43)"), ("ref", "rgb(89, 161, 79)"),
         ("update", "rgb(225, 87, 89)"), ("sync", "rgb(176, 122, 161)"), ("rollout", "rgb(78, 121, 167)")]
HTML_PROMPT = "<b>bold</b> <img src=x onerror=\"document.title='pwned'\"> What is 6*7?"
LONG_PROMPT = "Natalia sold clips to 48 of her friends in April. " * 12  # ~600 characters


def _memory(seq: int, phase: str, dt: float, *, rank: int = 0) -> dict:
    return {"seq": seq, "type": "memory", "time": T0 + dt,
            "data": {"step": 1 if dt < 8 else 2, "phase": phase, "device": "cpu", "rss": int((500 + 10 * dt) * 2**20),
                     "peak": int((520 + 10 * dt) * 2**20), "rank": rank}}


def _sample(seq: int, *, step: int, uid: str, prompt: str, index: int = 0) -> dict:
    return {"seq": seq, "type": "sample", "time": T0 + 20 + seq, "data": {
        "step": step, "uid": uid, "index": index, "reward": 0.5, "advantage": 0.1, "response_length": 7,
        "num_turns": 1, "finish_reason": "stop",
        "messages": [{"role": "system", "content": "You are a careful solver."},
                     {"role": "user", "content": prompt},
                     {"role": "assistant", "content": "#### 42"}]}}


BAND_PATHS = """() => [...document.querySelectorAll('#memory-chart .layer-below .shapelayer path')].map((p) => {
    const box = p.getBoundingClientRect();
    const style = getComputedStyle(p);
    return {fill: style.fill, opacity: Number(style.fillOpacity) * Number(style.opacity), left: box.left,
            width: box.width, height: box.height};
})"""


def test_memory_timeline_draws_its_phase_bands(page_as, quiet_run, ingest, shot):
    alice, run, token = quiet_run
    events = [_memory(i + 1, phase, dt) for i, (phase, dt) in enumerate(MEMORY)]
    # A second rank's points: the bands still follow one rank (the lowest), not both.
    events += [_memory(100 + i, phase, dt + 0.2, rank=1) for i, (phase, dt) in enumerate(MEMORY)]
    assert ingest(run.pk, token, events)["accepted"] == len(events)
    page = page_as(alice)
    page.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("#memory-chart .main-svg")
    page.evaluate("document.getElementById('memory-chart').scrollIntoView()")
    shot(page, "pages-memory-bands")
    bands = page.evaluate(BAND_PATHS)
    assert [b["fill"] for b in bands] == [colour for _, colour in BANDS], bands
    plot = page.locator("#memory-chart .nsewdrag").first.bounding_box()
    for (phase, _), band in zip(BANDS, bands):
        # Visible: the plot's height, a few pixels wide at least (the 10 ms one too), not almost transparent.
        assert band["width"] >= 2.5 and band["height"] >= 0.9 * plot["height"], (phase, band, plot)
        assert band["opacity"] >= 0.2, (phase, band)
    assert bands[0]["width"] >= 0.2 * plot["width"] and bands[3]["width"] >= 0.2 * plot["width"], (bands, plot)
    assert bands[2]["width"] < 0.01 * plot["width"], bands  # the short one is not blown up either
    for before, after in zip(bands, bands[1:]):  # side by side, none hidden under the next
        assert after["left"] >= before["left"] + before["width"] - 0.5, (before, after)
    # Together they cover the timeline from the first point to the last.
    assert sum(b["width"] for b in bands) >= 0.85 * plot["width"], (bands, plot)
    # Zoomed in on the reference's 10 ms (one second shown), its band is as wide as it really is.
    page.evaluate("""(t0) => Plotly.relayout(document.getElementById('memory-chart'),
        {'xaxis.range': [new Date((t0 + 3.6) * 1000), new Date((t0 + 4.6) * 1000)]})""", T0)
    page.wait_for_timeout(300)
    zoomed = page.evaluate(BAND_PATHS)
    ref = [b for b in zoomed if b["fill"] == "rgb(89, 161, 79)"][0]
    assert 0.007 * plot["width"] <= ref["width"] <= 0.015 * plot["width"], (ref, plot)
    page.evaluate("Plotly.relayout(document.getElementById('memory-chart'), {'xaxis.autorange': true})")
    page.wait_for_timeout(300)
    assert [round(b["width"]) for b in page.evaluate(BAND_PATHS)] == [round(b["width"]) for b in bands]
    # The legend's entries for the phases use the same colours.
    legend = page.evaluate("""() => [...document.querySelectorAll('#memory-chart .legend .traces')].map((t) =>
        [t.querySelector('.legendtext').textContent, (t.querySelector('.legendpoints path, .legendundefined path')
         || {style: {}}).style.fill])""")
    by_name = dict(legend)
    for phase, colour in BANDS:
        assert by_name.get(phase) == colour, legend


def test_samples_table_shows_prompt_text_newest_step_first(page_as, quiet_run, ingest, shot):
    alice, run, token = quiet_run
    events = [_sample(1, step=1, uid="uid-first", prompt="What is 2+3?"),
              _sample(2, step=1, uid="uid-first", prompt="What is 2+3?", index=1),
              _sample(3, step=2, uid="uid-html", prompt=HTML_PROMPT),
              _sample(4, step=3, uid="uid-long", prompt=LONG_PROMPT)]
    assert ingest(run.pk, token, events)["accepted"] == 4
    page = page_as(alice)
    page.goto(f"/runs/{run.pk}/")
    page.wait_for_load_state("load")

    def rows():
        return page.locator("#samples-body tr")

    def check_table(what: str) -> None:
        steps = [int(rows().nth(i).locator("td").first.inner_text()) for i in range(rows().count())]
        assert steps == [3, 2, 1, 1], (what, steps)
        first = rows().first.locator("td.prompt")
        link = first.locator("a")
        # Shortened on the page, whole (whitespace as sent) in the title; the uid on its own line.
        assert link.inner_text().startswith("Natalia sold clips") and len(link.inner_text()) <= 100, what
        assert link.get_attribute("title") == LONG_PROMPT, what
        assert first.locator(".uid").inner_text() == "uid-long", what
        html = rows().nth(1).locator("td.prompt")
        assert html.locator("a").inner_text().startswith("<b>bold</b> <img src=x"), what
        assert html.locator("a").get_attribute("title") == HTML_PROMPT, what
        assert html.locator("b, img").count() == 0, what
        assert page.title() != "pwned" and page.dialogs == [], what

    check_table("server-rendered")
    # The same table from the samples API (the filter's button redraws it from there).
    page.evaluate("document.getElementById('samples-body').replaceChildren()")
    page.click("#sample-filters button[type=submit]")
    page.wait_for_function("document.querySelectorAll('#samples-body tr').length === 4")
    check_table("from the API")
    page.wait_for_timeout(300)  # a failed <img> would fire its onerror asynchronously
    assert page.evaluate("document.title") != "pwned"
    shot(page, "pages-samples-table")

    # A sample reported while the page is open comes in at the top, and gets its prompt text.
    page.wait_for_selector("#live-conn[data-socket=open]", state="attached")
    page.evaluate("window.__noReload = 1")
    assert ingest(run.pk, token, [_sample(5, step=4, uid="uid-live", prompt="A live one: 9*9?")])["accepted"] == 1
    page.wait_for_function("""() => {
        const td = document.querySelector('#samples-body tr td.prompt a');
        return td && td.textContent === 'A live one: 9*9?';
    }""", timeout=20_000)
    assert rows().first.locator("td").first.inner_text() == "4"
    assert rows().first.locator("td.prompt .uid").inner_text() == "uid-live"
    assert page.evaluate("window.__noReload") == 1
    # The step column still sorts both ways.
    page.click("#samples-table th[data-order=step]")
    page.wait_for_function("document.querySelector('#samples-body tr td').textContent === '1'")


def _metrics(seq: int, step: int) -> dict:
    return {"seq": seq, "type": "metrics", "time": T0 + seq,
            "data": {"step": step, "metrics": {"critic/score/mean": 0.25 * step}}}


def test_the_headers_step_follows_the_websocket_as_the_details_do(page_as, quiet_run, ingest):
    """A step the websocket brings shows in the controls card's header ("step N") at once, as in the
    page's details: the header once waited for the card's refresh (every 5 s) and said one step less
    than the details meanwhile. A refresh answered from before that step (the card is fetched while
    the step arrives) does not put the older step back. Here every refresh is answered with the card
    as it was at step 1."""
    alice, run, token = quiet_run
    assert ingest(run.pk, token, [_metrics(1, 1)])["accepted"] == 1
    page = page_as(alice)
    page.goto(f"/runs/{run.pk}/")
    stale = page.request.get(f"/runs/{run.pk}/controls/").text()
    assert '<span data-field="step">1</span>' in stale
    refreshes = []

    def answer_stale(route):
        refreshes.append(route.request.url)
        route.fulfill(status=200, content_type="text/html; charset=utf-8", body=stale)

    page.route(f"**/runs/{run.pk}/controls/", answer_stale)
    header, details = "#run-controls .run-progress [data-field=step]", "#live-step"
    assert page.inner_text(header) == "1" and page.inner_text(details) == "1"
    page.wait_for_selector("#live-conn[data-socket=open]", state="attached")
    assert ingest(run.pk, token, [_metrics(2, 2), _metrics(3, 3)])["accepted"] == 2
    page.wait_for_function("document.getElementById('live-step').textContent === '3'")
    assert page.inner_text(header) == "3"
    seen = len(refreshes)
    deadline = 12_000
    while len(refreshes) <= seen and deadline > 0:
        page.wait_for_timeout(250)
        deadline -= 250
    assert len(refreshes) > seen, "the controls card was not refreshed"
    page.wait_for_timeout(300)
    assert page.inner_text(header) == "3" and page.inner_text(details) == "3"


def test_a_constant_metrics_axis_reads_its_value(page_as, quiet_run, ingest):
    """A metric that never changes (a constant learning rate, 3e-4) is drawn on an axis around its
    value: Plotly's own range for a flat line is v ± 1, which put it on the 0 gridline between ticks
    of ±0.5, so the panel read 0. A metric that moves keeps Plotly's own range."""
    alice, run, token = quiet_run
    events = [{"seq": s, "type": "metrics", "time": T0 + s,
               "data": {"step": s, "metrics": {"actor/lr": 3e-4, "actor/entropy": 0.5 - 0.1 * s}}} for s in (1, 2, 3)]
    assert ingest(run.pk, token, events)["accepted"] == 3
    page = page_as(alice)
    page.goto(f"/runs/{run.pk}/")
    axis = "(f) => document.querySelector(`.plot[data-family='${f}']`)._fullLayout.yaxis.range"
    page.wait_for_function("() => !!document.querySelector(\".plot[data-family='actor/lr'] .main-svg\")")
    low, high = page.evaluate(axis, "actor/lr")
    assert low < 3e-4 < high and high - low <= 3.001e-4, (low, high)
    ticks = page.locator(".plot[data-family='actor/lr'] .ytick text").all_inner_texts()
    assert not any(t in ("0", "0.5", "\u22120.5") for t in ticks), ticks
    low, high = page.evaluate(axis, "actor/entropy")
    assert low < 0.2 and high > 0.4, (low, high)
