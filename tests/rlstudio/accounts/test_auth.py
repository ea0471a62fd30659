"""Login/logout, API tokens (command, profile page, Token auth), CSRF on session POSTs."""
import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from rlstudio.accounts.models import ApiToken, AuditEvent
from rlstudio.accounts.services import key_hash

from ..conftest import PASSWORD

pytestmark = pytest.mark.django_db


def test_login_and_logout(alice):
    client = Client()
    assert client.get("/accounts/login/").status_code == 200
    bad = client.post("/accounts/login/", {"username": "alice", "password": "wrong"})
    assert bad.status_code == 200 and "did not match" in bad.content.decode()
    ok = client.post("/accounts/login/", {"username": "alice", "password": PASSWORD})
    assert ok.status_code == 302 and ok["Location"] == "/runs/"
    home = client.get("/runs/").content.decode()
    assert "Logout (alice)" in home and "/admin/" not in home  # no Admin link for non-staff
    assert client.post("/accounts/logout/").status_code == 302
    assert client.get("/runs/").status_code == 302


def test_api_token_command_prints_a_key_that_authenticates(alice, capsys):
    call_command("api_token", "alice", "--name", "ci")
    key = capsys.readouterr().out.strip()
    token = ApiToken.objects.get(user=alice)
    assert token.name == "ci" and token.key_hash == key_hash(key) and key.startswith(token.key_prefix)
    assert not ApiToken.objects.filter(key_hash=key).exists()  # the key itself is never stored
    client = Client()
    response = client.get("/api/v1/runs/", HTTP_AUTHORIZATION=f"Token {key}")
    assert response.status_code == 200 and response.json() == {"count": 0, "results": []}
    token.refresh_from_db()
    assert token.last_used is not None
    bad = client.get("/api/v1/runs/", HTTP_AUTHORIZATION=f"Token {key[:-2]}xx")
    assert bad.status_code == 401 and bad.json()["error"]["code"] == "authentication_failed"
    assert bad["WWW-Authenticate"] == "Token"


def test_api_token_command_unknown_user(db):
    with pytest.raises(CommandError, match="No user named 'nobody'"):
        call_command("api_token", "nobody")


def test_profile_creates_shows_once_and_revokes(alice, bob):
    client = Client()
    client.force_login(alice)
    response = client.post("/accounts/profile/tokens/", {"name": "laptop"}, follow=True)
    page = response.content.decode()
    token = ApiToken.objects.get(user=alice)
    key = page.split('id="new-key">')[1].split("<")[0]
    assert key_hash(key) == token.key_hash
    assert key not in client.get("/accounts/profile/").content.decode()  # shown only once
    assert Client().get("/api/v1/quota/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 200
    # Bob cannot revoke Alice's token.
    other = Client()
    other.force_login(bob)
    assert other.post(f"/accounts/profile/tokens/{token.pk}/revoke/").status_code == 404
    assert client.post(f"/accounts/profile/tokens/{token.pk}/revoke/").status_code == 302
    assert not ApiToken.objects.exists()
    assert Client().get("/api/v1/quota/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 401
    assert AuditEvent.objects.filter(action="api_token.revoke", actor=alice).exists()


def test_token_name_with_a_nul_is_a_400_naming_it(alice):
    """PostgreSQL refuses a NUL: the page's form field is refused (the NUL guard) before the token is made."""
    client = Client()
    client.force_login(alice)
    for r in (client.post("/accounts/profile/tokens/", {"name": "a\x00b"}),  # multipart, as the test client sends
              client.post("/accounts/profile/tokens/", "name=a%00b", content_type="application/x-www-form-urlencoded")):
        assert r.status_code == 400
        assert 'data-field="name"' in r.content.decode() and "name must not contain the NUL" in r.content.decode()
    assert not ApiToken.objects.exists() and not AuditEvent.objects.filter(action="api_token.create").exists()


def test_csrf_enforced_on_session_posts(alice):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.post("/accounts/profile/tokens/", {"name": "x"}).status_code == 403
    assert not ApiToken.objects.exists()
    # The API's session authentication enforces CSRF too (the JSON error shape, a 403).
    response = client.post("/api/v1/runs/", {}, content_type="application/json")
    assert response.status_code == 403
    assert "CSRF" in response.json()["error"]["message"]
    # With the token from the page, the same session POST goes through.
    client.get("/accounts/profile/")
    csrf = client.cookies["csrftoken"].value
    ok = client.post("/accounts/profile/tokens/", {"name": "x", "csrfmiddlewaretoken": csrf})
    assert ok.status_code == 302 and ApiToken.objects.count() == 1


@pytest.mark.parametrize("cookie", ['sessionid="abcdefgh\\000xyz"', "sessionid=abcdefgh\x00xyz",
                                    "sessionid=../../../../etc/passwd", "sessionid=" + "a" * 5000])
def test_a_session_cookie_django_never_made_reads_as_no_session(alice, cookie):
    """A quoted cookie's octal escape (`\\000`) is a NUL, which PostgreSQL refuses: the session lookup
    was a 500 on every page and API call (before login). A key that is not one Django makes reads as
    no session: the login page, a 401, the health check; a real session still works."""
    anonymous = Client(HTTP_COOKIE=cookie)
    assert anonymous.get("/runs/").status_code == 302
    assert anonymous.get("/api/v1/runs/").status_code in (401, 403)
    assert anonymous.get("/accounts/login/").status_code == 200
    signed_in = Client()
    signed_in.force_login(alice)
    assert signed_in.get("/runs/").status_code == 200
