"""The login page after a refused try keeps the user name typed (escaped) and puts the focus on the
password, the one field to type again; a fresh page focuses the empty user name."""
import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_a_refused_login_keeps_the_name_and_focuses_the_password(alice):
    client = Client()
    fresh = client.get("/accounts/login/").content.decode()
    assert 'id="id_username" autocomplete="username" required autofocus>' in fresh
    assert 'id="id_password" autocomplete="current-password" required>' in fresh

    page = client.post("/accounts/login/", {"username": "alice", "password": "wrong"}).content.decode()
    assert "did not match" in page
    assert 'id="id_username" autocomplete="username" required value="alice">' in page
    assert 'id="id_password" autocomplete="current-password" required autofocus>' in page

    odd = client.post("/accounts/login/", {"username": '"><b>x', "password": "wrong"}).content.decode()
    assert 'value="&quot;&gt;&lt;b&gt;x"' in odd and "<b>x" not in odd
