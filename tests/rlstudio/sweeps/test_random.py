"""Random-search sweeps on real PostgreSQL: launched through the service, the API and the form, with
the drawn runs inside their ranges and in their configs, the seed stored and reproducing the draw,
every refusal naming its field (or its form row) with nothing left behind, and owner/staff only."""
import pytest
from django.test import Client

from rlstudio.quotas.models import GpuQuota
from rlstudio.runs.models import Run
from rlstudio.sweeps.models import Sweep, SweepRun
from rlstudio.sweeps.sample import clean_random_axes, draw_points
from rlstudio.sweeps.services import sweep_launch
from tests.rlstudio.conftest import api_client
from tests.rlstudio.sweeps.conftest import LR, N

pytestmark = pytest.mark.django_db

LR_LOG = {"key": LR, "min": 1e-7, "max": 1e-5, "scale": "log"}
N_INT = {"key": N, "min": 2, "max": 8, "type": "int"}


@pytest.fixture(autouse=True)
def room(alice):
    """Room in alice's queue for two sweeps of runs (the default quota queues 5)."""
    GpuQuota.objects.create(user=alice, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0, max_queued_runs=16)


def _client(user):
    c = Client()
    c.force_login(user)
    return c


def _nothing_left():
    assert Sweep.objects.count() == 0 and SweepRun.objects.count() == 0 and Run.objects.count() == 0


def _links(sweep):
    return list(sweep.sweep_runs.select_related("run").order_by("index"))


def test_a_random_sweep_draws_its_runs_inside_the_ranges_into_their_configs(alice, inputs):
    sweep = sweep_launch(owner=alice, name="rnd", inputs=inputs, axes=[LR_LOG, N_INT], mode="random", runs=5, seed=42)
    assert (sweep.mode, sweep.seed) == ("random", 42)
    assert sweep.axes == [{"key": LR, "min": 1e-7, "max": 1e-5, "scale": "log", "type": "float"},
                          {"key": N, "min": 2, "max": 8, "scale": "linear", "type": "int"}]
    links = _links(sweep)
    assert [link.index for link in links] == [0, 1, 2, 3, 4]
    for link in links:
        lr, n = link.params[LR], link.params[N]
        assert 1e-7 <= lr <= 1e-5 and isinstance(n, int) and 2 <= n <= 8
        cfg = link.run.config["actor_rollout_ref"]
        assert (cfg["actor"]["optim"]["lr"], cfg["rollout"]["n"]) == (lr, n)
        assert link.run.name == f"rnd/{LR}={lr},{N}={n}" and link.run.tags == ["rnd"]
    assert len({(link.params[LR], link.params[N]) for link in links}) == 5
    again = sweep_launch(owner=alice, name="rnd2", inputs=inputs, axes=[LR_LOG, N_INT], mode="random", runs=5, seed=42)
    assert [link.params for link in _links(again)] == [link.params for link in links]


def test_without_a_seed_the_server_picks_one_that_reproduces_the_draw(alice, inputs):
    sweep = sweep_launch(owner=alice, name="r", inputs=inputs, mode="random", runs=4,
                         axes=[LR_LOG, {"key": N, "values": [2, 4, 8]}])
    assert sweep.seed is not None and 0 <= sweep.seed < 2**31
    redrawn = draw_points(clean_random_axes(sweep.axes), 4, sweep.seed)
    assert [p.params for p in redrawn] == [link.params for link in _links(sweep)]
    grid = sweep_launch(owner=alice, name="g", inputs=inputs, axes=[{"key": N, "values": [2, 4]}])
    assert (grid.mode, grid.seed) == ("grid", None)


def _body(ready, **extra):
    return {"name": "api-rnd", "dataset": ready["dataset"].pk, "model": ready["model"].pk, "preset": "cpu_smoke",
            "mode": "random", "runs": 6, "seed": 7, "axes": [LR_LOG, N_INT], **extra}


def test_api_launches_a_random_sweep_others_get_404(alice, bob, staff, ready):
    resp = api_client(alice).post("/api/v1/sweeps/", _body(ready), format="json")
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert body["mode"] == "random" and body["seed"] == 7 and len(body["runs"]) == 6
    assert body["axes"][0] == {"key": LR, "min": 1e-7, "max": 1e-5, "scale": "log", "type": "float"}
    for row in body["runs"]:
        assert 1e-7 <= row["params"][LR] <= 1e-5 and 2 <= row["params"][N] <= 8
        assert Run.objects.get(pk=row["run"]).config["actor_rollout_ref"]["rollout"]["n"] == row["params"][N]
    assert Run.objects.filter(owner=alice).count() == 6
    listed = api_client(alice).get("/api/v1/sweeps/").json()["results"][0]
    assert (listed["mode"], listed["seed"], listed["run_count"]) == ("random", 7, 6)
    sid = body["id"]
    assert api_client(bob).get(f"/api/v1/sweeps/{sid}/").status_code == 404
    assert api_client(bob).post(f"/api/v1/sweeps/{sid}/stop/", {}, format="json").status_code == 404
    assert api_client(staff).get(f"/api/v1/sweeps/{sid}/").json()["seed"] == 7


@pytest.mark.parametrize("extra,field", [
    ({"axes": [{"key": N, "values": [2, 4]}, {"key": LR, "min": 0, "max": 1e-5, "scale": "log"}]}, "axes[1].min"),
    ({"axes": [{"key": LR, "min": 1e-5, "max": 1e-7}]}, "axes[0].min"),
    ({"axes": [{"key": N, "min": 2, "max": "8", "type": "int"}]}, "axes[0].max"),
    ({"axes": [{"key": LR, "min": 1e-7, "max": 1e-5, "scale": "ln"}]}, "axes[0].scale"),
    ({"axes": [{"key": "trainer.default_local_dir", "min": 1, "max": 2}]}, "axes[0].key"),
    ({"axes": [{"key": N, "min": -5, "max": 0, "type": "int"}]}, "axes[0]"),  # every n drawn refused by the schema
    ({"runs": None}, "runs"),
    ({"runs": 0}, "runs"),
    ({"runs": 17}, "runs"),
    ({"runs": "6"}, "runs"),
    ({"runs": 4, "axes": [{"key": N, "values": [2, 4]}]}, "runs"),  # 2 distinct points only
    ({"axes": [{"key": LR, "min": 1e-7, "max": 10**400}]}, "axes[0].max"),  # was an OverflowError: 500
    ({"seed": -1}, "seed"),
    ({"seed": "abc"}, "seed"),
    ({"seed": 2**31}, "seed"),
    ({"mode": "bayes"}, "mode"),
    ({"mode": "grid", "runs": None, "seed": None}, "axes[0]"),  # a grid refuses the range on its axis
    ({"mode": "grid", "axes": [{"key": N, "values": [2, 4]}], "seed": None}, "runs"),
    ({"mode": "grid", "axes": [{"key": N, "values": [2, 4]}], "runs": None}, "seed"),
])
def test_api_refusals_name_the_field_and_leave_nothing(alice, ready, extra, field):
    resp = api_client(alice).post("/api/v1/sweeps/", _body(ready, **extra), format="json")
    assert resp.status_code == 400, resp.content
    assert resp.json()["error"]["field"] == field, resp.json()
    _nothing_left()


def _form(ready, **extra):
    return {"name": "form-rnd", "dataset": ready["dataset"].pk, "model": ready["model"].pk, "preset": "cpu_smoke",
            "gpus": 0, "mode": "random", "runs": 3, "seed": 9, "axis_key_1": LR, "axis_values_1": "1e-7..1e-5 log",
            "axis_key_2": N, "axis_values_2": "2, 4", **extra}


def test_the_form_launches_a_random_sweep_and_its_page_says_mode_seed_and_draws(alice, bob, ready):
    resp = _client(alice).post("/sweeps/new/", _form(ready))
    assert resp.status_code == 302, resp.content.decode()[-3000:]
    sweep = Sweep.objects.get(name="form-rnd")
    assert (sweep.mode, sweep.seed, sweep.sweep_runs.count()) == ("random", 9, 3)
    assert sweep.axes[0] == {"key": LR, "min": 1e-7, "max": 1e-5, "scale": "log", "type": "float"}
    assert sweep.axes[1] == {"key": N, "values": [2, 4]}
    html = _client(alice).get(f"/sweeps/{sweep.pk}/").content.decode()
    assert "random search: 3 runs" in html and 'id="sweep-seed"><code>9</code>' in html
    assert "1e-07 .. 1e-05 (log, float)" in html
    for link in _links(sweep):
        assert 1e-7 <= link.params[LR] <= 1e-5 and link.params[N] in (2, 4)
        row = html[html.index(f'data-run-id="{link.run_id}"'):]
        row = row[:row.index("</tr>")]
        assert f"<td>{link.params[LR]}</td>" in row and f"<td>{link.params[N]}</td>" in row
    listing = _client(alice).get("/sweeps/").content.decode()
    assert "random search" in listing and "∈ [1e-07, 1e-05] log," in listing and "</code> × 2<" in listing
    assert _client(bob).get(f"/sweeps/{sweep.pk}/").status_code == 404


def test_the_form_shows_the_mode_choice_runs_and_seed(alice):
    html = _client(alice).get("/sweeps/new/").content.decode()
    assert 'name="mode" value="random"' in html and 'name="runs"' in html and 'name="seed"' in html
    assert "1e-7..1e-5 log" in html  # how to write a range


@pytest.mark.parametrize("extra,field,text", [
    ({"mode": "grid", "runs": "", "seed": ""}, "axis_values_1", "axis 1 (axes[0])"),  # a range in a grid
    ({"axis_values_2": "2..x"}, "axis_values_2", "axis 2: 'x' is not a number"),
    ({"axis_values_1": "0..1e-5 log"}, "axis_values_1", "axis 1 (axes[0].min)"),
    ({"axis_values_1": "1e-5..1e-7"}, "axis_values_1", "must be below max"),
    ({"runs": ""}, "runs", "a random sweep needs runs"),
    ({"runs": "5", "axis_values_1": "1e-6, 3e-6"}, "runs", "4 distinct points"),
    ({"seed": "-3"}, "seed", ""),
    ({"axis_values_2": "2.." + "9" * 400}, "axis_values_2", "finite number"),  # was an OverflowError: 500
])
def test_the_form_puts_a_random_refusal_on_its_row_or_field(alice, ready, extra, field, text):
    resp = _client(alice).post("/sweeps/new/", _form(ready, **extra))
    assert resp.status_code == 400
    errors = resp.context["form"].errors
    assert field in errors, errors
    assert text in " ".join(errors[field])
    _nothing_left()


def test_a_grid_ignores_the_random_boxes_left_filled(alice, ready):
    """Switching the form back to grid after typing Runs and Seed launches the grid (the boxes are random
    search's only); the API, which has no boxes, still refuses runs or seed on a grid."""
    resp = _client(alice).post("/sweeps/new/", _form(ready, mode="grid", axis_values_1="1e-6, 3e-6"))
    assert resp.status_code == 302, resp.content.decode()[-3000:]
    sweep = Sweep.objects.get(name="form-rnd")
    assert (sweep.mode, sweep.seed, sweep.sweep_runs.count()) == ("grid", None, 4)


def test_migrating_back_to_grid_only_sweeps_is_refused_while_random_ones_exist(alice, inputs):
    """Migration 0002's reverse step (run first when going back to 0001, whose mode constraint knows grid
    sweeps only) says what to do instead of failing on the constraint."""
    import importlib

    from django.apps import apps

    from rlstudio.sweeps.models import Sweep

    migration = importlib.import_module("rlstudio.sweeps.migrations.0002_sweep_random_seed")
    sweep_launch(owner=alice, name="grid-one", inputs=inputs, axes=[{"key": N, "values": [2, 4]}])
    migration.refuse_back_while_random_sweeps(apps, None)  # grid sweeps only: going back may proceed
    sweep_launch(owner=alice, name="rnd", inputs=inputs, axes=[LR_LOG], mode="random", runs=2, seed=1)
    with pytest.raises(RuntimeError, match=r"1 random-search sweep\(s\) exist .* delete them"):
        migration.refuse_back_while_random_sweeps(apps, None)
    Sweep.objects.filter(mode="random").delete()
    migration.refuse_back_while_random_sweeps(apps, None)
