"""The alerts API and pages: rules per run and as defaults, the catalogue, notifications, settings; what
another user never sees (their rules, notifications, firings of a run they may not read); the run page's
card, the header's centre, the run form's defaults and the quota page's budgets."""
from __future__ import annotations

import json

import pytest
from django.test import Client
from rest_framework.test import APIClient

from rlstudio.alerts.models import AlertFiring, AlertRule, Notification, WebhookEndpoint
from rlstudio.alerts.services import rule_create, rules_cache_clear

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache():
    rules_cache_clear()


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_create_list_patch_delete_rules(alice, make_run):
    run = make_run(alice)
    a = api(alice)
    resp = a.post("/api/v1/alerts/rules/", {"kind": "entropy_collapse"}, format="json")
    assert resp.status_code == 201, resp.content
    default = resp.json()
    assert default["run"] is None and default["metric"] == "actor/entropy" and default["threshold"] == 0.05
    assert default["window"] == 3 and default["op"] == "<" and default["title"] == "Entropy collapse"
    resp = a.post("/api/v1/alerts/rules/", {"kind": "threshold", "run": run.pk, "metric": "actor/pg_loss",
                                            "op": ">", "threshold": 5, "pause": True}, format="json")
    assert resp.status_code == 201 and resp.json()["run"] == run.pk and resp.json()["pause"] is True
    own = resp.json()
    assert [r["id"] for r in a.get("/api/v1/alerts/rules/").json()] == [default["id"], own["id"]]
    assert [r["id"] for r in a.get(f"/api/v1/alerts/rules/?run={run.pk}").json()] == [own["id"]]
    assert [r["id"] for r in a.get("/api/v1/alerts/rules/?defaults=1").json()] == [default["id"]]
    resp = a.patch(f"/api/v1/alerts/rules/{own['id']}/", {"threshold": 7.5, "enabled": False}, format="json")
    assert resp.status_code == 200 and resp.json()["threshold"] == 7.5 and resp.json()["enabled"] is False
    # the run page's view of the run: both rules apply (its own is disabled, so only the default shows)
    body = a.get(f"/api/v1/runs/{run.pk}/alerts/").json()
    assert [r["id"] for r in body["rules"]] == [default["id"]] and body["firings"] == []
    assert body["budget"] == {"gpus": 0, "gpu_hours": 0.0, "cap": None, "level": "", "paused_by": ""}
    assert a.delete(f"/api/v1/alerts/rules/{own['id']}/").status_code == 204
    assert AlertRule.objects.filter(owner=alice).count() == 1


@pytest.mark.parametrize("body,field", [
    ({}, "kind"), ({"kind": "nope"}, "kind"), ({"kind": "threshold"}, "metric"),
    ({"kind": "threshold", "metric": "a/b", "threshold": 1}, "op"),
    ({"kind": "kl_high", "metric": "/etc/passwd; rm -rf"}, "metric"),
    ({"kind": "kl_high", "window": 0}, "window"), ({"kind": "kl_high", "webhook": "http://10.0.0.1/x"}, "webhook"),
    ({"kind": "kl_high", "email": "yes"}, "email"), ({"kind": "kl_high", "run": 999999}, "run"),
])
def test_bad_rules_are_400s_naming_the_field(alice, body, field):
    resp = api(alice).post("/api/v1/alerts/rules/", body, format="json")
    assert resp.status_code == 400, resp.content
    assert resp.json()["error"]["field"] == field


def test_another_users_rules_notifications_and_firings_are_never_visible(alice, bob, make_run):
    run = make_run(alice)
    rule = rule_create(owner=alice, run=run, data={"kind": "kl_high"})
    firing = AlertFiring.objects.create(run=run, rule=rule, kind="kl_high", metric="actor/ppo_kl", step=3,
                                        values={"actor/ppo_kl": 0.9}, message="secret-ish")
    Notification.objects.create(user=alice, run=run, kind="alert", event="kl_high", title="alice's", firing=firing)
    b = api(bob)
    assert b.get("/api/v1/alerts/rules/").json() == []
    assert b.get(f"/api/v1/alerts/rules/{rule.pk}/").status_code == 404
    assert b.patch(f"/api/v1/alerts/rules/{rule.pk}/", {"enabled": False}, format="json").status_code == 404
    assert b.delete(f"/api/v1/alerts/rules/{rule.pk}/").status_code == 404
    assert b.get(f"/api/v1/alerts/rules/?run={run.pk}").status_code == 404
    assert b.get("/api/v1/alerts/notifications/").json() == {"unread": 0, "results": []}
    assert b.post("/api/v1/alerts/notifications/read/", {}, format="json").json() == {"marked": 0, "unread": 0}
    assert Notification.objects.get(user=alice).read is False
    assert b.get(f"/api/v1/runs/{run.pk}/alerts/").status_code == 404
    # pages: bob's header shows none of alice's; the form POSTs cannot touch her rule
    page = Client()
    page.force_login(bob)
    assert "alice's" not in page.get("/alerts/").content.decode()
    assert page.post(f"/alerts/rules/{rule.pk}/delete/").status_code == 404
    assert page.post(f"/alerts/rules/{rule.pk}/toggle/").status_code == 404
    assert AlertRule.objects.filter(pk=rule.pk, enabled=True).exists()
    # alice sees hers
    a = api(alice)
    assert a.get("/api/v1/alerts/notifications/?unread=1").json()["unread"] == 1
    assert a.get(f"/api/v1/runs/{run.pk}/alerts/").json()["firings"][0]["values"] == {"actor/ppo_kl": 0.9}


def test_a_reader_of_a_shared_run_sees_its_firings_not_its_rules(alice, bob, make_run):
    from rlstudio.runs.services import run_share

    run = make_run(alice)
    rule = rule_create(owner=alice, run=run, data={"kind": "kl_high"})
    AlertFiring.objects.create(run=run, rule=rule, kind="kl_high", metric="actor/ppo_kl", step=1, message="m")
    run_share(run=run, by=alice, visibility="everyone")
    body = api(bob).get(f"/api/v1/runs/{run.pk}/alerts/").json()
    assert len(body["firings"]) == 1 and "rules" not in body
    page = Client()
    page.force_login(bob)
    html = page.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="run-alerts"' in html and "Rules watching this run" not in html


def test_catalogue_webhooks_and_settings(alice, staff):
    WebhookEndpoint.objects.create(name="team-slack", description="the team channel", url="https://hooks.example/x",
                                   secret_env="RLSTUDIO_WEBHOOK_SECRET_TEAM")
    WebhookEndpoint.objects.create(name="off", url="https://hooks.example/y", secret_env="RLSTUDIO_WEBHOOK_SECRET_Y",
                                   enabled=False)
    a = api(alice)
    kinds = {k["kind"]: k for k in a.get("/api/v1/alerts/catalogue/").json()}
    assert kinds["kl_high"]["metric"] == "actor/ppo_kl" and kinds["no_heartbeat"]["source"] == "heartbeat"
    assert kinds["reward_collapse"]["recommended"] and not kinds["threshold"]["recommended"]
    assert a.get("/api/v1/alerts/webhooks/").json() == [{"name": "team-slack", "description": "the team channel"}]
    got = a.get("/api/v1/alerts/settings/").json()
    assert got["routes"]["failed"] == ["app", "email"] and got["webhook"] is None
    resp = a.put("/api/v1/alerts/settings/", {"routes": {"failed": ["app", "webhook"]}, "webhook": "team-slack"},
                 format="json")
    assert resp.status_code == 200 and resp.json()["routes"]["failed"] == ["app", "webhook"]
    assert resp.json()["webhook"] == "team-slack" and resp.json()["routes"]["lost"] == ["app", "email"]
    for body, field in [({"routes": {"failed": ["sms"]}}, "routes"), ({"routes": {"exploded": ["app"]}}, "routes"),
                        ({"webhook": "off"}, "webhook"), ({"webhook": None}, "webhook")]:
        resp = a.put("/api/v1/alerts/settings/", body, format="json")
        assert resp.status_code == 400 and resp.json()["error"]["field"] == field, body


def test_pages_show_the_centre_the_defaults_the_card_and_budgets(alice, make_run):
    run = make_run(alice, gpus=1)
    rule_create(owner=alice, data={"kind": "reward_collapse"})
    rule_create(owner=alice, run=run, data={"kind": "gpu_hours", "threshold": 5})
    Notification.objects.create(user=alice, run=run, kind="lifecycle", event="failed", title="Run failed here")
    AlertFiring.objects.create(run=run, kind="kl_high", metric="actor/ppo_kl", step=4, message="kl 0.9")
    page = Client()
    page.force_login(alice)
    home = page.get("/runs/").content.decode()
    assert 'id="notify-centre"' in home and 'id="notify-count">1<' in home and "js/notifications.js" in home
    form = page.get("/runs/new/").content.decode()
    assert 'id="alert-defaults"' in form and "Reward collapse" in form and "critic/score/mean" in form
    detail = page.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="run-alerts"' in detail and "of a budget of 5.00" in detail and "kl 0.9" in detail
    marks = detail.split('id="alert-marks" type="application/json">')[1].split("</script>")[0]
    assert json.loads(marks) == [{"id": AlertFiring.objects.get().pk, "step": 4, "kind": "kl_high",
                                  "metric": "actor/ppo_kl", "message": "kl 0.9", "paused": False}]
    quota = page.get("/runs/quota/").content.decode()
    assert 'id="gpu-budgets"' in quota and run.name in quota
    alerts = page.get("/alerts/").content.decode()
    assert "Run failed here" in alerts and 'id="lifecycle-settings"' in alerts
    # form POSTs: add a default, the recommended set, settings, mark read
    assert page.post("/alerts/rules/add/", {"kind": "threshold", "metric": "actor/pg_loss", "op": ">",
                                            "threshold": "3", "window": "2"}).status_code == 302
    assert AlertRule.objects.filter(owner=alice, kind="threshold", window=2, run=None).exists()
    page.post("/alerts/rules/recommended/")
    kinds = set(AlertRule.objects.filter(owner=alice, run=None).values_list("kind", flat=True))
    assert {"entropy_collapse", "kl_high", "no_heartbeat", "reward_hacking", "zero_adv_groups"} <= kinds
    assert AlertRule.objects.filter(owner=alice, run=None, kind="reward_collapse").count() == 1  # not twice
    page.post("/alerts/settings/", {"finished:app": "1", "failed:email": "1"})
    from rlstudio.alerts.models import NotificationSettings

    assert NotificationSettings.objects.get(user=alice).routes["finished"] == ["app"]
    page.post("/alerts/notifications/read/")
    assert not Notification.objects.filter(user=alice, read=False).exists()
    # an outside `next` is not followed
    resp = page.post("/alerts/notifications/read/", {"next": "https://evil.example/"})
    assert resp["Location"] == "/alerts/"


def test_nul_characters_and_non_ascii_digits_are_400s_naming_the_field(alice):
    """A NUL (which PostgreSQL refuses) anywhere in a rule or the settings, and a window of '²' (a digit
    to str.isdigit, not to int), are refused naming the field; nothing is stored."""
    from rlstudio.alerts.models import NotificationSettings
    from rlstudio.alerts.services import AlertInvalid, webhook_by_name

    a = api(alice)
    for body, field in [({"kind": "kl_high", "webhook": "a\x00"}, "webhook"),
                        ({"kind": "kl_high", "metric": "actor/\x00kl"}, "metric"),
                        ({"kind": "kl_high", "window": "\u00b2"}, "window"),
                        ({"kind": "kl_high", "window": "\u0663"}, "window")]:  # ARABIC-INDIC DIGIT THREE
        resp = a.post("/api/v1/alerts/rules/", body, format="json")
        assert resp.status_code == 400 and resp.json()["error"]["field"] == field, (body, resp.content)
    assert a.post("/api/v1/alerts/rules/", {"kind": "kl_high", "window": " 4 "}, format="json").json()["window"] == 4
    rule = AlertRule.objects.get(owner=alice)
    resp = a.patch(f"/api/v1/alerts/rules/{rule.pk}/", {"webhook": "\x00"}, format="json")
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "webhook"
    for body, field in [({"webhook": "a\x00"}, "webhook"), ({"routes": {"fail\x00ed": ["app"]}}, "routes.fail\ufffded")]:
        resp = a.put("/api/v1/alerts/settings/", body, format="json")
        assert resp.status_code == 400 and resp.json()["error"]["field"] == field, body
    assert not NotificationSettings.objects.filter(user=alice, webhook__isnull=False).exists()
    page = Client()
    page.force_login(alice)
    resp = page.post("/alerts/rules/add/", {"kind": "kl_high", "webhook": "\x00"})
    assert resp.status_code == 400 and 'data-field="webhook"' in resp.content.decode()
    assert AlertRule.objects.filter(owner=alice).count() == 1
    with pytest.raises(AlertInvalid) as err:
        webhook_by_name("x\x00")
    assert err.value.field == "webhook"


def test_yes_no_parameters_take_the_usual_words_and_refuse_others(alice, make_run):
    """One reading of a yes/no parameter across the API (rlstudio.api.params.bool_param): the yes words
    filter, the no words and an empty value do not, anything else is a 400 naming the parameter."""
    client = api(alice)
    default = client.post("/api/v1/alerts/rules/", {"kind": "entropy_collapse"}, format="json").json()["id"]
    own = client.post("/api/v1/alerts/rules/", {"kind": "entropy_collapse", "run": make_run(alice).pk},
                      format="json").json()["id"]
    read = Notification.objects.create(user=alice, kind="lifecycle", event="finished", title="read", read=True)
    unread = Notification.objects.create(user=alice, kind="lifecycle", event="finished", title="unread")
    for word, yes in [("1", True), ("TRUE", True), (" yes", True), ("on", True),
                      ("0", False), ("false", False), ("No", False), ("off", False), ("", False)]:
        rules = {r["id"] for r in client.get(f"/api/v1/alerts/rules/?defaults={word}").json()}
        assert rules == ({default} if yes else {default, own}), word
        notes = {n["id"] for n in client.get(f"/api/v1/alerts/notifications/?unread={word}").json()["results"]}
        assert notes == ({unread.pk} if yes else {read.pk, unread.pk}), word
    for url, name in [("/api/v1/alerts/rules/?defaults=maybe", "defaults"),
                      ("/api/v1/alerts/notifications/?unread=maybe", "unread")]:
        resp = client.get(url)
        assert resp.status_code == 400 and resp.json()["error"]["field"] == name


def test_email_boxes_are_off_while_nothing_can_be_mailed_and_keep_their_setting(alice, settings):
    """No address on the account (or no mail server): the e-mail column is shown disabled and unticked,
    and saving the form keeps the stored e-mail routes for when mail works."""
    from rlstudio.alerts.models import NotificationSettings
    from rlstudio.alerts.services import settings_update

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"  # mail works on the site
    settings_update(user=alice, routes={"failed": ["app", "email"]})
    page = Client()
    page.force_login(alice)
    html = page.get("/alerts/").content.decode()  # alice has no address
    assert 'aria-label="failed by email (e-mail cannot be sent)"' in html
    assert '<input type="hidden" name="failed:email" value="1">' in html
    assert 'name="failed:email" value="1" aria-label' not in html  # no tickable box
    page.post("/alerts/settings/", {"failed:app": "1", "failed:email": "1"})  # what the form sends
    assert NotificationSettings.objects.get(user=alice).routes["failed"] == ["app", "email"]
    alice.email = "alice@example.org"
    alice.save()
    html = page.get("/alerts/").content.decode()
    assert 'name="failed:email" value="1" aria-label="failed by email" checked' in html
    assert "e-mail cannot be sent" not in html
