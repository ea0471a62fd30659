"""A user changes their own password from the profile page: the old one and the new one twice, checked
by the site's validators; refused changes answer 400 with the reason on the field; a change keeps this
session, signs the user's other sessions out, leaves API tokens working, and is audited."""
import pytest
from django.test import Client

from rlstudio.accounts.models import AuditEvent
from rlstudio.accounts.services import api_token_create
from tests.rlstudio.conftest import PASSWORD

pytestmark = pytest.mark.django_db
NEW = "a-longer-Passphrase-77"


def _client(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def test_the_profile_links_to_the_form(alice):
    body = _client(alice).get("/accounts/profile/").content.decode()
    assert 'href="/accounts/profile/password/">Change your password</a>' in body
    form = _client(alice).get("/accounts/profile/password/")
    assert form.status_code == 200
    for field in ("old_password", "new_password1", "new_password2"):
        assert f'name="{field}"' in form.content.decode()


def test_anonymous_is_sent_to_log_in():
    r = Client().get("/accounts/profile/password/")
    assert r.status_code == 302 and r["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize("data, field, text", [
    ({"old_password": "wrong", "new_password1": NEW, "new_password2": NEW}, "old_password", "incorrectly"),
    ({"old_password": PASSWORD, "new_password1": NEW, "new_password2": NEW + "x"}, "new_password2",
     "didn"),
    ({"old_password": PASSWORD, "new_password1": "short", "new_password2": "short"}, "new_password2",
     "too short"),
    ({"old_password": PASSWORD, "new_password1": "password123", "new_password2": "password123"}, "new_password2",
     "too common"),
])
def test_a_refused_change_is_a_400_on_its_field(alice, data, field, text):
    r = _client(alice).post("/accounts/profile/password/", data)
    assert r.status_code == 400
    body = r.content.decode()
    assert f'class="field-error" data-field="{field}"' in body and text in body
    alice.refresh_from_db()
    assert alice.check_password(PASSWORD)
    assert not AuditEvent.objects.filter(action="account.password_change").exists()


def test_a_change_keeps_this_session_signs_out_others_and_keeps_tokens(alice):
    token = api_token_create(user=alice, name="ci")
    here, elsewhere = _client(alice), _client(alice)
    r = here.post("/accounts/profile/password/",
                  {"old_password": PASSWORD, "new_password1": NEW, "new_password2": NEW}, follow=True)
    assert r.redirect_chain[-1][0] == "/accounts/profile/"
    assert "Password changed." in r.content.decode()
    alice.refresh_from_db()
    assert alice.check_password(NEW) and not alice.check_password(PASSWORD)
    assert here.get("/accounts/profile/").status_code == 200  # still signed in here
    assert elsewhere.get("/accounts/profile/").status_code == 302  # the other session is out
    assert Client().get("/api/v1/runs/", HTTP_AUTHORIZATION=f"Token {token.key}").status_code == 200
    event = AuditEvent.objects.get(action="account.password_change")
    assert event.actor == alice and event.object_id == str(alice.pk)


def test_guessing_the_old_password_is_throttled_as_logins_are(alice):
    """A session without the password (one left signed in, or stolen) cannot try old passwords without end
    and take the account over: each wrong old password counts as a failed login of the account
    (django-axes, AXES_FAILURE_LIMIT 5); at the limit the change answers 429 saying so, even with the
    right old password, and the account's login is locked as after five wrong logins."""
    c = _client(alice)
    wrong = {"old_password": "not-it", "new_password1": NEW, "new_password2": NEW}
    for _ in range(4):
        assert c.post("/accounts/profile/password/", wrong).status_code == 400
    fifth = c.post("/accounts/profile/password/", wrong)
    assert fifth.status_code == 429 and "Too many wrong passwords" in fifth.content.decode()
    right = c.post("/accounts/profile/password/", {**wrong, "old_password": PASSWORD})
    assert right.status_code == 429 and 'data-field="old_password"' in right.content.decode()
    alice.refresh_from_db()
    assert alice.check_password(PASSWORD)  # unchanged
    login = Client(REMOTE_ADDR="10.9.9.9").post("/accounts/login/", {"username": "alice", "password": PASSWORD})
    assert login.status_code == 429
    assert not AuditEvent.objects.filter(action="account.password_change").exists()
