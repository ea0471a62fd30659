"""Teams (Django auth groups): the lookups the sharing forms use, the services that change a team's
members (audited), the admin's Teams page and the user page's teams, and the profile page's list.
"""
import pytest
from django.contrib.auth.models import Group, Permission
from django.test import Client

from rlstudio.accounts.models import AuditEvent, Team
from rlstudio.accounts.teams import (
    TeamNotNamed,
    clean_team_name,
    team_delete,
    team_for_sharing,
    team_names_for_sharing,
    team_set_members,
    teams_for_sharing,
    teams_of,
    user_set_teams,
)
from rlstudio.runs.models import Run
from rlstudio.runs.selectors import visible_runs
from rlstudio.runs.services import run_share

pytestmark = pytest.mark.django_db

HOSTILE = '<img src=x onerror="alert(1)">'
TEAMS = "/admin/accounts/team/"


def _as(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def _team(name: str, *members) -> Group:
    team = Group.objects.create(name=name)
    team.user_set.set(members)
    return team


@pytest.fixture
def carol(make_user):
    return make_user("carol")


def test_who_may_share_with_which_team(alice, bob, carol, staff):
    lab = _team("lab", alice, bob)
    other = _team("other", carol)
    assert team_for_sharing(by=alice, name=" lab ") == lab
    assert team_for_sharing(by=alice, name="other") is None  # exists, not hers: as if it did not
    assert team_for_sharing(by=alice, name="nowhere") is None
    assert team_for_sharing(by=staff, name="other") == other
    for bad in ("", "  ", "a\x00b", None, 3):
        assert team_for_sharing(by=alice, name=bad) is None
    assert team_names_for_sharing(user=alice) == ["lab"]
    assert team_names_for_sharing(user=staff) == ["lab", "other"]
    assert teams_for_sharing(by=alice, names=["lab", "lab "]) == [lab]
    assert teams_for_sharing(by=alice, names=["other"], already=[other]) == [other]  # kept, not added
    for names in (["other"], ["nowhere"], "lab", [""], [None]):
        with pytest.raises(TeamNotNamed):
            teams_for_sharing(by=alice, names=names)


def test_team_names_are_checked():
    assert clean_team_name("  lab  ") == "lab"
    for bad in ("", "   ", "a\nb", "a\x00b", "x" * 151, None):
        with pytest.raises(ValueError):
            clean_team_name(bad)


def test_teams_of_lists_the_users_teams_with_active_members(alice, bob, carol):
    _team("b-team", alice, bob, carol)
    _team("a-team", alice)
    _team("not-mine", bob)
    carol.is_active = False
    carol.save()
    assert teams_of(user=alice) == [
        {"id": Group.objects.get(name="a-team").pk, "name": "a-team", "members": ["alice"]},
        {"id": Group.objects.get(name="b-team").pk, "name": "b-team", "members": ["alice", "bob"]}]
    assert [t["members"] for t in teams_of(user=carol)] == [["alice", "bob"]]  # an inactive member is not listed


def test_membership_changes_are_audited_and_decide_access(alice, bob, carol, staff, make_run):
    lab = _team("lab", alice)
    run = make_run(alice, "r")
    run_share(run=run, by=alice, teams=["lab"])

    def sees(user) -> bool:
        return visible_runs(Run.objects.filter(pk=run.pk), user=user).exists()

    assert not sees(bob)
    team_set_members(team=lab, members=[alice, bob], by=staff)
    assert sees(bob)
    team_set_members(team=lab, members=[alice, bob], by=staff)  # unchanged: no event
    user_set_teams(user=carol, teams=[lab], by=staff)
    assert sees(carol)
    events = list(AuditEvent.objects.filter(action__in=["team.members", "user.teams"]).order_by("id"))
    assert [(e.action, e.actor_id, e.data["to"]) for e in events] == [
        ("team.members", staff.pk, ["alice", "bob"]), ("user.teams", staff.pk, ["lab"])]
    team_delete(team=lab, by=staff)
    assert not sees(bob) and not sees(carol) and not run.shared_with_teams.exists()
    assert AuditEvent.objects.get(action="team.delete").data == {"name": "lab", "members": ["alice", "bob", "carol"]}


def test_the_profile_page_lists_the_users_teams_escaped(alice, bob):
    page = _as(alice).get("/accounts/profile/").content.decode()
    assert 'id="profile-teams"' in page and "You are in no team." in page
    _team(HOSTILE, alice, bob)
    _team("hidden-team", bob)
    page = _as(alice).get("/accounts/profile/").content.decode()
    assert HOSTILE not in page and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page
    assert "alice, bob" in page and "hidden-team" not in page


def test_the_admin_calls_groups_teams_and_sets_members_through_the_service(staff, alice, bob, carol):
    admin = _as(staff)
    assert admin.get("/admin/auth/group/").status_code == 404  # Django's page is replaced by Teams
    index = admin.get("/admin/").content.decode()
    assert f'href="{TEAMS}"' in index and ">Teams<" in index
    resp = admin.post(f"{TEAMS}add/", {"name": HOSTILE, "members": [alice.pk, bob.pk]})
    assert resp.status_code == 302, resp.content.decode()[-2000:]
    team = Team.objects.get(name=HOSTILE)
    assert sorted(team.user_set.values_list("username", flat=True)) == ["alice", "bob"]
    created = AuditEvent.objects.get(action="team.create")
    assert (created.actor_id, created.object_type, created.object_id) == (staff.pk, "auth.group", str(team.pk))
    assert created.data == {"name": HOSTILE}
    event = AuditEvent.objects.get(action="team.members")
    assert event.actor_id == staff.pk and event.data == {"team": HOSTILE, "from": [], "to": ["alice", "bob"]}
    listing = admin.get(TEAMS).content.decode()
    assert HOSTILE not in listing and "&lt;img src=x onerror=" in listing
    page = admin.get(f"{TEAMS}{team.pk}/change/").content.decode()
    assert HOSTILE not in page and 'name="members"' in page
    resp = admin.post(f"{TEAMS}{team.pk}/change/", {"name": "lab", "members": [carol.pk]})
    assert resp.status_code == 302
    assert list(Group.objects.get(pk=team.pk).user_set.values_list("username", flat=True)) == ["carol"]
    assert AuditEvent.objects.filter(action="team.members").count() == 2
    renamed = AuditEvent.objects.get(action="team.rename")  # shares and the audit log name teams by name
    assert renamed.actor_id == staff.pk and renamed.data == {"from": HOSTILE, "to": "lab"}
    admin.post(f"{TEAMS}{team.pk}/change/", {"name": "lab", "members": [carol.pk]})  # unchanged: no event
    assert AuditEvent.objects.filter(action__in=["team.create", "team.rename", "team.members"]).count() == 4
    for name, message in [("a\nb", "control characters"), ("lab", "already exists")]:
        resp = admin.post(f"{TEAMS}add/", {"name": name, "members": []})
        assert resp.status_code == 200 and message in resp.content.decode(), name
    assert Group.objects.count() == 1
    assert admin.post(f"{TEAMS}{team.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not Group.objects.exists() and AuditEvent.objects.get(action="team.delete").data["members"] == ["carol"]


def test_the_admin_bulk_delete_goes_through_the_service(staff, alice):
    teams = [_team(f"t{i}", alice) for i in range(2)]
    resp = _as(staff).post(TEAMS, {"action": "delete_selected", "_selected_action": [t.pk for t in teams],
                                   "post": "yes"})
    assert resp.status_code == 302 and not Group.objects.exists()
    assert AuditEvent.objects.filter(action="team.delete").count() == 2


def test_the_user_page_calls_groups_teams_and_saves_them_audited(staff, alice):
    lab = _team("lab")
    admin = _as(staff)
    url = f"/admin/auth/user/{alice.pk}/change/"
    page = admin.get(url).content.decode()
    assert ">Teams" in page and 'name="groups"' in page
    data = {"username": "alice", "first_name": "", "last_name": "", "email": "", "is_active": "on",
            "groups": [lab.pk], "user_permissions": [], "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00", "last_login_0": "", "last_login_1": ""}
    resp = admin.post(url, data)
    assert resp.status_code == 302, resp.content.decode()[-3000:]
    assert list(alice.groups.values_list("name", flat=True)) == ["lab"]
    event = AuditEvent.objects.get(action="user.teams")
    assert event.actor_id == staff.pk and event.data == {"user": "alice", "from": [], "to": ["lab"]}


def test_the_user_list_filters_by_team_under_that_name(staff, alice, bob):
    lab = _team("lab", alice)
    admin = _as(staff)
    page = admin.get("/admin/auth/user/").content.decode()
    assert 'data-filter-title="teams"' in page and 'data-filter-title="groups"' not in page
    assert "By teams" in page and "By groups" not in page
    page = admin.get(f"/admin/auth/user/?groups__id__exact={lab.pk}").content.decode()
    assert ">alice<" in page and ">bob<" not in page  # the filter still filters
    picker = admin.get(f"/admin/auth/user/{alice.pk}/change/").content.decode()
    assert 'data-field-name="teams"' in picker and 'data-field-name="groups"' not in picker


def test_users_who_are_not_staff_cannot_open_the_teams_page(alice, make_user):
    team = _team("lab", alice)
    for url in (TEAMS, f"{TEAMS}{team.pk}/change/"):
        resp = _as(alice).get(url)
        assert resp.status_code == 302 and resp.url.startswith("/admin/login/"), url
    ops = make_user("ops")
    ops.is_staff = True
    ops.save()
    assert _as(ops).get(TEAMS).status_code == 403  # staff without the team permissions
    ops.user_permissions.set(Permission.objects.filter(content_type__app_label="auth",
                                                       content_type__model="group"))
    assert _as(ops).get(TEAMS).status_code == 403  # auth.group's permissions are not the Team proxy's
    ops.user_permissions.set(Permission.objects.filter(content_type__app_label="accounts",
                                                       content_type__model="team"))
    assert _as(ops).get(TEAMS).status_code == 200  # accounts | team's are (security.md)
    resp = _as(alice).post(f"{TEAMS}{team.pk}/change/", {"name": "mine", "members": [alice.pk]})
    assert resp.status_code == 302 and Group.objects.get(pk=team.pk).name == "lab"
