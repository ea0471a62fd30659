"""Sharing a run read-only with a team (a Django auth Group): its members read it as a user it is
shared with by name does, for as long as they are members, and control nothing; anyone else gets a
404. The owner names only a team they are in (staff: any team); any other name is a 400 on `teams`
that says the same whether or not the team exists.
"""
import asyncio

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from rlstudio.accounts.models import AuditEvent
from rlstudio.accounts.teams import team_set_members
from rlstudio.projects.services import project_create, project_share
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.selectors import run_list_for, visible_runs
from rlstudio.runs.services import RunInputInvalid, RunNotPermitted, run_set_project, run_share, run_stop
from rlstudio.telemetry.models import MetricRow, Sample

pytestmark = pytest.mark.django_db

HOSTILE = '<b id="x">lab</b>'


def _api(user) -> APIClient:
    c = APIClient()
    c.force_authenticate(user)
    return c


def _page(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def _team(name: str, *members) -> Group:
    team = Group.objects.create(name=name)
    team.user_set.set(members)
    return team


def _sees(user, run) -> bool:
    return visible_runs(Run.objects.filter(pk=run.pk), user=user).exists()


@pytest.fixture
def carol(make_user):
    return make_user("carol")


@pytest.fixture
def lab(alice, bob):
    """The team "lab": alice (the owner) and bob."""
    return _team("lab", alice, bob)


@pytest.fixture
def team_run(alice, lab, make_run):
    """alice's finished run with a checkpoint, a metric row and a sample, shared with the team lab."""
    run = make_run(alice, "alice-run")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, checkpoint_path="/tmp/ckpt", step=2)
    run.refresh_from_db()
    MetricRow.objects.create(run=run, step=1, time=timezone.now(), metrics={"critic/score/mean": 0.5})
    Sample.objects.create(run=run, seq=1, step=1, uid="u1", index=0, reward=1.0,
                          transcript={"messages": [{"role": "user", "content": "2+2?"}]})
    run_share(run=run, by=alice, add_teams=["lab"])
    return run


READ_URLS = ["/runs/{id}/", "/api/v1/runs/{id}/", "/api/v1/runs/{id}/metrics/", "/api/v1/runs/{id}/samples/",
             "/api/v1/runs/{id}/groups/?step=1", "/api/v1/runs/{id}/logs/", "/api/v1/runs/{id}/memory/",
             "/api/v1/runs/{id}/checkpoints/", "/api/v1/runs/{id}/evaluations/", "/api/v1/runs/{id}/exports/",
             "/api/v1/runs/{id}/metrics.csv", "/api/v1/runs/compare/?ids={id}",
             "/runs/{id}/groups/?step=1&uid=u1", "/runs/{id}/prompts/?uid=u1", "/runs/{id}/controls/"]


def test_a_team_member_reads_the_run_and_a_non_member_gets_404(team_run, bob, carol):
    member, outsider = _page(bob), _page(carol)
    for url in READ_URLS:
        assert member.get(url.format(id=team_run.pk)).status_code == 200, url
        assert outsider.get(url.format(id=team_run.pk)).status_code == 404, url
    sample = Sample.objects.get(run=team_run)
    assert member.get(f"/runs/{team_run.pk}/samples/{sample.pk}/").status_code == 200
    body = _api(bob).get(f"/api/v1/runs/{team_run.pk}/").json()
    assert body["access"] == "shared" and body["shared_with"] == [] and body["shared_with_teams"] == []
    assert body["checkpoint"] == ""  # a reader's view, as for a user share
    assert [r["name"] for r in _api(bob).get("/api/v1/runs/?scope=shared").json()["results"]] == ["alice-run"]
    assert _api(carol).get("/api/v1/runs/").json()["count"] == 0
    page = member.get("/").content.decode()
    assert "alice-run" in page and '<span class="shared-mark">shared</span>' in page
    assert "Shared with you by <strong>alice</strong>" in member.get(f"/runs/{team_run.pk}/").content.decode()


def test_a_team_member_cannot_control_the_run(team_run, bob):
    api, page, pk = _api(bob), _page(bob), team_run.pk
    for method, url, body in [("post", f"/api/v1/runs/{pk}/stop/", {"force": True}),
                              ("post", f"/api/v1/runs/{pk}/resume/", {}),
                              ("post", f"/api/v1/runs/{pk}/clone/", {}),
                              ("patch", f"/api/v1/runs/{pk}/", {"tags": ["mine"]}),
                              ("get", f"/api/v1/runs/{pk}/sharing/", None),
                              ("put", f"/api/v1/runs/{pk}/sharing/", {"teams": []}),
                              ("delete", f"/api/v1/runs/{pk}/", None),
                              ("get", f"/api/v1/runs/{pk}/job-log/", None),
                              ("put", f"/api/v1/runs/{pk}/retention/", {"mode": "per_step", "k": 1})]:
        resp = getattr(api, method)(url, body, format="json")
        assert resp.status_code == 403, (url, resp.content)
        assert resp.json()["error"]["code"] == "permission_denied", url
    for url, data in [(f"/runs/{pk}/stop/", {"force": "1"}), (f"/runs/{pk}/clone/", {}),
                      (f"/runs/{pk}/annotate/", {"tags": "x"}), (f"/runs/{pk}/share/", {"remove_team": "lab"})]:
        assert page.post(url, data).status_code == 403, url
    team_run.refresh_from_db()
    assert team_run.tags == [] and list(team_run.shared_with_teams.values_list("name", flat=True)) == ["lab"]
    assert Run.objects.count() == 1
    with pytest.raises(RunNotPermitted):
        run_stop(run=team_run, by=bob)
    for control in ('action="/runs/%d/resume/"', 'action="/runs/%d/share/"', 'action="/runs/%d/annotate/"'):
        assert control % pk not in page.get(f"/runs/{pk}/").content.decode(), control


def test_joining_the_team_gives_access_and_leaving_takes_it_away(team_run, lab, alice, bob, carol, staff):
    assert not _sees(carol, team_run)
    team_set_members(team=lab, members=[alice, bob, carol], by=staff)
    assert _sees(carol, team_run)
    assert _api(carol).get(f"/api/v1/runs/{team_run.pk}/").status_code == 200
    team_set_members(team=lab, members=[alice, carol], by=staff)
    assert not _sees(bob, team_run)
    assert _api(bob).get(f"/api/v1/runs/{team_run.pk}/").status_code == 404
    assert _page(bob).get(f"/runs/{team_run.pk}/").status_code == 404
    assert [e.data["to"] for e in AuditEvent.objects.filter(action="team.members").order_by("id")] == [
        ["alice", "bob", "carol"], ["alice", "carol"]]


def test_share_and_unshare_with_a_team_through_the_api_audited(alice, bob, lab, make_run):
    run = make_run(alice, "r")
    api = _api(alice)
    resp = api.put(f"/api/v1/runs/{run.pk}/sharing/", {"teams": ["lab"]}, format="json")
    assert resp.status_code == 200 and resp.json() == {"visibility": "private", "users": [], "teams": ["lab"]}
    assert _sees(bob, run)
    assert api.get(f"/api/v1/runs/{run.pk}/").json()["shared_with_teams"] == ["lab"]
    resp = api.put(f"/api/v1/runs/{run.pk}/sharing/", {"teams": []}, format="json")
    assert resp.json()["teams"] == [] and not _sees(bob, run)
    assert [e.data["to"]["teams"] for e in AuditEvent.objects.filter(action="run.share").order_by("id")] == [
        ["lab"], []]


def test_a_team_that_is_not_the_owners_is_a_400_naming_teams_without_telling_it_exists(
        alice, bob, carol, lab, make_run):
    _team("other", bob, carol)  # exists, alice is not in it
    run = make_run(alice, "r")
    api = _api(alice)
    answers = {}
    for name in ("other", "nowhere"):
        resp = api.put(f"/api/v1/runs/{run.pk}/sharing/", {"teams": ["lab", name]}, format="json")
        assert resp.status_code == 400 and resp.json()["error"]["field"] == "teams"
        answers[name] = resp.json()["error"]["message"].replace(name, "NAME")
    assert answers["other"] == answers["nowhere"] == "no such team of yours: 'NAME'"
    for bad in ("lab", [""], ["a\x00b"], [3]):
        resp = api.put(f"/api/v1/runs/{run.pk}/sharing/", {"teams": bad}, format="json")
        assert resp.status_code == 400 and resp.json()["error"]["field"] in ("teams", "teams.0"), bad
    assert run.shared_with_teams.count() == 0 and not _sees(carol, run)  # nothing half-done
    with pytest.raises(RunInputInvalid) as exc:
        run_share(run=run, by=alice, add_teams=["other"])
    assert exc.value.field == "teams"


def test_staff_share_with_any_team_and_the_owner_may_keep_it(alice, carol, make_run, staff):
    outside = _team("outside", carol)
    run = make_run(alice, "r")
    resp = _api(staff).put(f"/api/v1/runs/{run.pk}/sharing/", {"teams": ["outside"]}, format="json")
    assert resp.status_code == 200 and _sees(carol, run)
    # alice is not in "outside", but may send back the whole list with it, and take it off.
    api = _api(alice)
    assert api.put(f"/api/v1/runs/{run.pk}/sharing/", {"teams": ["outside"]}, format="json").status_code == 200
    assert api.put(f"/api/v1/runs/{run.pk}/sharing/", {"teams": []}, format="json").status_code == 200
    assert not _sees(carol, run) and outside.runs_shared_with_team.count() == 0


def test_a_run_shared_many_ways_is_listed_once_and_the_list_query_count_is_bounded(alice, bob, lab, make_run):
    lab2 = _team("lab2", alice, bob)
    project = project_create(owner=alice, name="p")
    project_share(project=project, by=alice, users=["bob"], teams=["lab", "lab2"])
    runs = [make_run(alice, f"r{i}") for i in range(3)]
    for run in runs:
        run_share(run=run, by=alice, visibility="everyone", users=["bob"], teams=["lab", "lab2"])
        run_set_project(run=run, by=alice, project_id=project.pk)
    assert lab2.runs_shared_with_team.count() == 3
    assert sorted(r.name for r in run_list_for(user=bob)) == ["r0", "r1", "r2"]
    assert _api(bob).get("/api/v1/runs/?scope=shared").json()["count"] == 3

    def list_queries(user) -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert _api(user).get("/api/v1/runs/").status_code == 200
        return len(ctx.captured_queries)

    few = {user: list_queries(user) for user in (alice, bob)}
    for i in range(3, 8):
        run = make_run(alice, f"r{i}")
        run_share(run=run, by=alice, teams=["lab", "lab2"])
    assert _api(bob).get("/api/v1/runs/").json()["count"] == 8
    owner_rows = _api(alice).get("/api/v1/runs/").json()["results"]
    assert {tuple(r["shared_with_teams"]) for r in owner_rows} == {("lab", "lab2")}
    # the team shares are prefetched (the owner's list names them), not read per run
    assert {user: list_queries(user) for user in (alice, bob)} == few
    with CaptureQueriesContext(connection) as ctx:
        assert _page(bob).get("/").status_code == 200
    page_queries = len(ctx.captured_queries)
    run_share(run=make_run(alice, "r9"), by=alice, teams=["lab"])
    with CaptureQueriesContext(connection) as ctx:
        _page(bob).get("/")
    assert len(ctx.captured_queries) <= page_queries + 1  # not one more per run


def test_the_run_page_shares_with_a_team_and_escapes_its_name(alice, bob, carol, make_run):
    hostile = _team(HOSTILE, alice, carol)
    run = make_run(alice, "r")
    page = _page(alice)
    body = page.get(f"/runs/{run.pk}/").content.decode()
    assert 'name="add_team"' in body and "Share with team" in body and HOSTILE not in body
    assert '<option value="&lt;b id=&quot;x&quot;&gt;lab&lt;/b&gt;">' in body  # the datalist offers it, escaped
    resp = page.post(f"/runs/{run.pk}/share/", {"add_team": HOSTILE}, follow=True)
    body = resp.content.decode()
    assert HOSTILE not in body and "Shared with the team &lt;b id=&quot;x&quot;&gt;lab&lt;/b&gt;" in body
    assert 'value="&lt;b id=&quot;x&quot;&gt;lab&lt;/b&gt;"' in body  # the remove form
    assert _sees(carol, run) and not _sees(bob, run)
    resp = page.post(f"/runs/{run.pk}/share/", {"add_team": "nowhere"}, follow=True)
    assert "teams: no such team of yours: &#x27;nowhere&#x27;" in resp.content.decode()  # naming the field
    page.post(f"/runs/{run.pk}/share/", {"remove_team": HOSTILE})
    assert not _sees(carol, run) and hostile.runs_shared_with_team.count() == 0


def test_the_websocket_admits_a_member_and_closes_when_they_leave_the_team(
        team_run, lab, alice, bob, carol, staff, transactional_db):
    from asgiref.sync import sync_to_async
    from channels.layers import get_channel_layer

    from rlstudio.telemetry.broadcast import run_event_message, run_group
    from tests.rlstudio.telemetry.test_consumers import _connect, _session_cookie

    bob_cookie, carol_cookie = _session_cookie(bob), _session_cookie(carol)

    async def scenario():
        bob_ws = await _connect(f"/ws/runs/{team_run.pk}/", bob_cookie)
        carol_ws = await _connect(f"/ws/runs/{team_run.pk}/", carol_cookie)
        carol_close = await carol_ws.receive_output(timeout=5)
        layer, group = get_channel_layer(), run_group(team_run.pk)
        await layer.group_send(group, run_event_message({"seq": 9, "type": "log", "data": {"line": "x"}}))
        bob_msg = await bob_ws.receive_json_from(timeout=5)
        await sync_to_async(team_set_members)(team=lab, members=[alice], by=staff)
        bob_close = await bob_ws.receive_output(timeout=5)
        return carol_close, bob_msg, bob_close

    carol_close, bob_msg, bob_close = asyncio.run(scenario())
    assert carol_close == {"type": "websocket.close", "code": 4403}
    assert bob_msg["seq"] == 9
    assert bob_close == {"type": "websocket.close", "code": 4403}


def test_pages_of_a_run_list_shared_many_ways_hold_each_run_once_in_every_sort(alice, bob, lab, make_run):
    """Runs shared with bob by name, with two of his teams, through a project shared by name and with a
    team, and with everyone: paged 3 at a time in every sort of the runs list, each run comes once and
    the count is the runs' (the visibility rule is subqueries, no join to repeat a row)."""
    from django.http import QueryDict

    from rlstudio.paging import paged
    from rlstudio.runs.selectors import RUN_SORTS, RunFilter, runs_sorted

    _team("lab2", alice, bob)
    project = project_create(owner=alice, name="p")
    project_share(project=project, by=alice, users=["bob"], teams=["lab", "lab2"])
    runs = [make_run(alice, f"r{i}") for i in range(7)]
    for run in runs:
        run_share(run=run, by=alice, visibility="everyone", users=["bob"], teams=["lab", "lab2"])
        run_set_project(run=run, by=alice, project_id=project.pk)
    for scope in ("", "shared"):
        for key in RUN_SORTS:
            for sort in (key, f"-{key}"):
                qs = runs_sorted(run_list_for(user=bob, flt=RunFilter(scope=scope)), sort)
                first = paged(qs, QueryDict(""), per_page=3)
                assert first.page.paginator.count == 7, (scope, sort)
                seen = [r.pk for n in range(1, 4) for r in paged(qs, QueryDict(f"page={n}"), per_page=3).rows]
                assert sorted(seen) == sorted(r.pk for r in runs), (scope, sort)
