"""The transcript page keeps its view in the address (telemetry.views.token_view_state,
static/js/telemetry_tokens.js), in a real Chromium under the site's Content-Security-Policy (not
bypassed): a link with ?view=tokens&colour=adv opens the token view coloured by advantage; switching the
colouring and the tab writes them back with history.replaceState, the page's other parameters kept and
the defaults (the conversation, the log-prob) left out; a reload opens the page as it was left.

The run is never admitted (no quota): only the real ingest endpoint writes to it.
"""
from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest

pytestmark = [pytest.mark.django_db(transaction=True)]

T0 = 1_764_440_000.0
# Token 0 the prompt (not trained), tokens 1-2 trained with advantage 0.5, token 3 trained with -0.5.
VIEW = {"ids": [11, 12, 13, 14], "pieces": ["2+2?", "Th", "e 4", "<end>"], "loss_mask": [0, 1, 1, 1],
        "logprobs": [-0.5, -1.25, -0.01, -3.0], "ref_logprobs": None, "advantages": [0.0, 0.5, 0.5, -0.5],
        "rollout_logprobs": [None, -1.0, -0.31, -2.0]}
SAMPLE = {"seq": 1, "type": "sample", "time": T0 + 1, "data": {
    "step": 1, "uid": "p1", "index": 0, "reward": 1.0, "advantage": 0.5, "response_length": 3, "num_turns": 1,
    "finish_reason": "stop", "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "The 4"}],
    "token_view": VIEW}}


def _query(page) -> dict[str, list[str]]:
    return parse_qs(urlparse(page.url).query, keep_blank_values=True)


def _backgrounds(page) -> list[str]:
    return page.locator("#tokens .tok").evaluate_all("(els) => els.map((e) => e.style.backgroundColor)")


def _shown(page, *, tab: str, colour: str) -> None:
    """The page shows `tab` ("chat" or "tokens"), its button the active (and selected) tab, and `colour`
    selected."""
    from playwright.sync_api import expect

    other = "chat" if tab == "tokens" else "tokens"
    expect(page.locator(f"#tab-{tab}")).to_be_visible()
    expect(page.locator(f"#tab-{other}")).to_be_hidden()
    expect(page.locator(f".tabs button[data-tab={tab}]")).to_have_class("active")
    expect(page.locator(f".tabs button[data-tab={other}]")).not_to_have_class("active")
    # for assistive technology too: a tab list whose selected tab is the one shown
    expect(page.get_by_role("tab", selected=True)).to_have_attribute("aria-controls", f"tab-{tab}")
    expect(page.get_by_role("tabpanel")).to_have_attribute("id", f"tab-{tab}")
    expect(page.locator("#token-colour")).to_have_value(colour)


def test_the_token_view_and_its_colouring_live_in_the_address(page_as, quiet_run, ingest, shot):
    import re

    from playwright.sync_api import expect

    from rlstudio.telemetry.models import Sample

    alice, run, token = quiet_run
    assert ingest(run.pk, token, [SAMPLE])["accepted"] == 1
    sample = Sample.objects.get(run=run, seq=1)
    page = page_as(alice, bypass_csp=False)
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    path = f"/runs/{run.pk}/samples/{sample.pk}/"

    # A shared link: the token view, coloured by advantage (green above 0, red below), from the first paint.
    page.goto(f"{path}?from=share&view=tokens&colour=adv")
    _shown(page, tab="tokens", colour="adv")
    expect(page.locator("#token-legend")).to_have_text("green: advantage above 0; red: below 0 (deeper: larger)")
    bg = _backgrounds(page)
    assert bg[1].startswith("rgba(40, 160, 60") and bg[3].startswith("rgba(220, 50, 50"), bg
    assert _query(page) == {"from": ["share"], "view": ["tokens"], "colour": ["adv"]}  # nothing rewritten
    shot(page, "transcript-address-tokens-adv")

    # Another colouring: written to the address, the other parameters kept.
    page.select_option("#token-colour", "gap")
    expect(page).to_have_url(re.compile(r"colour=gap"))
    assert _query(page) == {"from": ["share"], "view": ["tokens"], "colour": ["gap"]}
    expect(page.locator("#token-legend")).to_contain_text("blue: the rollout engine more sure")
    assert _backgrounds(page)[2].startswith("rgba(170, 40, 170")  # rollout -0.31 < actor -0.01: purple

    # The conversation is the default: the tab goes from the address, the colouring stays.
    page.click(".tabs button[data-tab=chat]")
    expect(page).not_to_have_url(re.compile(r"view="))
    assert _query(page) == {"from": ["share"], "colour": ["gap"]}
    _shown(page, tab="chat", colour="gap")

    # Back to the tokens, by the log-prob (the default colouring: it goes from the address too).
    page.click(".tabs button[data-tab=tokens]")
    expect(page).to_have_url(re.compile(r"view=tokens"))
    page.select_option("#token-colour", "lp")
    expect(page).not_to_have_url(re.compile(r"colour="))
    assert _query(page) == {"from": ["share"], "view": ["tokens"]}
    expect(page.locator("#token-legend")).to_contain_text("orange: less likely")

    # A reload opens the page as it was left.
    page.select_option("#token-colour", "rollout")
    expect(page).to_have_url(re.compile(r"colour=rollout"))
    page.reload()
    _shown(page, tab="tokens", colour="rollout")
    assert _query(page) == {"from": ["share"], "view": ["tokens"], "colour": ["rollout"]}
    assert _backgrounds(page)[0] == ""  # the prompt token: no rollout log-prob, no colour

    # An unknown value is the default, without an error, and the address is made to say what is shown.
    page.goto(f"{path}?view=sideways&colour=plaid&from=x")
    _shown(page, tab="chat", colour="lp")
    expect(page).not_to_have_url(re.compile(r"plaid|sideways"))
    assert _query(page) == {"from": ["x"]}
    page.click(".tabs button[data-tab=tokens]")
    expect(page).to_have_url(re.compile(r"view=tokens"))
    assert _query(page) == {"view": ["tokens"], "from": ["x"]}
    page.select_option("#token-colour", "adv")
    expect(page).to_have_url(re.compile(r"colour=adv"))
    assert problems == [], problems
