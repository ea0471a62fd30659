"""Pages of the runs app: the runs list (home page: filters, sorting, runs picked to compare), the
launch form with its live preview, and the quota page. A run's controls are `control_views`'."""
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.shortcuts import render

from rlstudio.catalog.selectors import dataset_list_for
from rlstudio.paging import paged

from .models import RunStatus
from .selectors import (
    RUN_SCOPES,
    RUN_SORTS,
    RunFilter,
    latest_reward,
    run_duration,
    run_filter_choices,
    run_list_for,
    runs_sorted,
)


def _visible_parents(runs, *, user) -> set[int]:
    """Ids of the runs `runs` were resumed, cloned or forked from that `user` reads (one query)."""
    from .models import Run
    from .selectors import visible_runs

    ids = {r.parent_id for r in runs if r.parent_id}
    return set(visible_runs(Run.objects.filter(pk__in=ids), user=user).values_list("pk", flat=True)) if ids else set()


def _row(run) -> dict:
    progress = None
    if run.total_steps:
        progress = min(100, round(100 * run.step / run.total_steps))
    return {"run": run, "reward": latest_reward(run), "duration": run_duration(run), "progress": progress}


# The runs list's columns that sort (?sort=key, ?sort=-key descending), in the table's order; the
# default is newest first. Dates, steps, rewards and durations sort descending at the first click.
SORT_COLUMNS = {"name": "Name", "owner": "Owner", "project": "Project", "status": "State", "dataset": "Dataset", "model": "Model",
                "step": "Step", "reward": "Latest reward", "started": "Started", "duration": "Duration"}
_DESC_FIRST = {"step", "reward", "started", "duration", "created"}
_NUM_COLUMNS = {"step", "reward", "duration"}  # right-aligned, tabular figures (their cells are td.num)


def _sort_headers(sort: str, filters: dict) -> dict[str, dict]:
    """Each sortable column's link (the other direction when it is the sort, else its first direction,
    keeping the filters) and its aria-sort."""
    out = {}
    for key in SORT_COLUMNS:
        if sort.lstrip("-") == key:
            nxt, aria = (key if sort.startswith("-") else f"-{key}"), ("descending" if sort.startswith("-")
                                                                     else "ascending")
        else:
            nxt, aria = (f"-{key}" if key in _DESC_FIRST else key), "none"
        out[key] = {"query": urlencode({"sort": nxt, **filters}), "aria": aria, "label": SORT_COLUMNS[key],
                    "num": key in _NUM_COLUMNS}
    return out


def _list_filter(get) -> RunFilter:
    """The runs list's filters from the query string; a value that does not parse is ignored."""
    def _id(name):
        try:
            return int(get.get(name) or "")
        except ValueError:
            return None

    def _text(name):  # PostgreSQL refuses a NUL in a query
        return (get.get(name) or "").replace("\x00", "").strip()[:200] or None

    status = get.get("status") or None
    scope = get.get("scope") or ""
    return RunFilter(status=status if status in RunStatus.values else None, tag=_text("tag"), model=_id("model"),
                     dataset=_id("dataset"), q=_text("q"), scope=scope if scope in RUN_SCOPES else "",
                     project=_id("project"))


@login_required
def run_list(request):
    """The runs the user sees, filtered by state, tag, model, dataset, project, scope and text (name or
    note), sorted by a column; checkboxes pick runs for /runs/compare/ or, the user's own (all for
    staff), for Delete selected (`run_bulk_delete_view`; static/js/run_list.js)."""
    return run_list_page(request)


def run_list_page(request, *, project: int | None = None, extra: dict | None = None):
    """The runs list's page; with `project` (an id the caller checked the user sees) only that
    project's runs, the project filter fixed, and `extra` in the context (the project page's head)."""
    import dataclasses

    flt = _list_filter(request.GET)
    if project is not None:
        flt = dataclasses.replace(flt, project=project)
    sort = request.GET.get("sort") or "-created"
    if sort.lstrip("-") not in RUN_SORTS:
        sort = "-created"
    filters = {k: v for k, v in (("status", flt.status), ("tag", flt.tag), ("model", flt.model),
                                 ("dataset", flt.dataset), ("q", flt.q), ("scope", flt.scope),
                                 ("project", flt.project if project is None else None)) if v}
    page = paged(runs_sorted(run_list_for(user=request.user, flt=flt), sort), request.GET)
    runs = list(page.rows)
    choices = run_filter_choices(user=request.user)
    return render(
        request,
        "runs/run_list.html",
        {
            **(extra or {}),
            "rows": [_row(r) for r in runs],
            # the runs they were made from that the user reads: linked; the others named by id only
            "visible_parents": _visible_parents(runs, user=request.user),
            "paged": page,
            "headers": _sort_headers(sort, filters),
            "status": flt.status,
            "statuses": RunStatus.values,
            "flt": flt,
            "filtered": bool(filters),
            "filter_qs": urlencode(filters),
            "choices": choices,
            # the project column links a run's project only for whoever sees that project
            "visible_projects": {pk for pk, _label in choices["projects"]},
            "sort": sort,
            "has_datasets": dataset_list_for(user=request.user).exists(),
            "can_delete_any": any(request.user.is_staff or r.owner_id == request.user.pk for r in runs),
        },
    )


# ------------------------------------------------------------------ launch form and run controls
def _form(request, data=None):
    from rlstudio.catalog.selectors import model_asset_list_for
    from trainer.recipes import REGISTRY

    from .forms import RunForm
    from .selectors import run_config_list_for

    from rlstudio.registry.services import tool_set_names

    from .launch import reward_names

    datasets = dataset_list_for(user=request.user).filter(status="ready")
    models = model_asset_list_for(user=request.user)
    from .selectors import project_choices_of

    projects = project_choices_of(request.user)
    initial = {"preset": "cpu_smoke", "gpus": 0}
    wanted = request.GET.get("project")  # the project page's "New run in this project"
    if wanted and wanted in {str(pk) for pk, _name in projects}:
        initial["project"] = wanted
    # "Train on it" links of the dataset and model pages: ?dataset= / ?val_dataset= / ?model= preselect
    # one the user may use (ready datasets, policy models); anything else is ignored, as ?project= is.
    for name, choices in (("dataset", datasets), ("val_dataset", datasets), ("model", models.filter(kind="policy"))):
        wanted = request.GET.get(name) or ""
        if wanted.isascii() and wanted.isdigit() and len(wanted) < 12 and choices.filter(pk=int(wanted)).exists():
            initial[name] = int(wanted)
    # "Run again with changes": a run the user reads (else 404), as the form shows it; only to show the form
    # (a POST is an ordinary launch, which needs nothing of the source run, even one no longer readable)
    if data is None and "from" in request.GET:
        from .relaunch import relaunch_initial

        initial.update(relaunch_initial(user=request.user, run_id=request.GET["from"], choices={
            "datasets": datasets, "models": models.filter(kind="policy"), "reward_models": models.filter(kind="reward"),
            "tool_sets": set(tool_set_names()), "projects": {str(pk) for pk, _name in projects}}))
    if data is None and "from" not in request.GET:  # the one dataset (model) the user can pick is picked,
        # unless the address named one (or a run to start from: its own is shown, or none)
        for name, choices in (("dataset", datasets), ("model", models.filter(kind="policy"))):
            only = [] if name in initial or name in request.GET else list(choices.values_list("pk", flat=True)[:2])
            if len(only) == 1:
                initial[name] = only[0]
    return RunForm(data, datasets=datasets, models=models.filter(kind="policy"),
                   reward_models=models.filter(kind="reward"),
                   configs=run_config_list_for(user=request.user), presets=list(REGISTRY),
                   tool_sets=tool_set_names(), rewards=reward_names(), projects=projects, initial=initial)


def _add_errors(form, errors, *, typed: set[str]) -> None:
    """Each error on its field of the form (`RunForm.field_for_error`), keyed by what it names."""
    for err in errors:
        where = form.field_for_error(err.field, source=err.source, typed=typed)
        if where is not None and where in form.errors and any(err.message in e for e in form.errors[where]):
            continue  # the form's own cleaning said it already
        form.add_error(where, f"{err.field}: {err.message}")


def _config_errors(form, first=None, *, config=None):
    """`first` (what the service refused) and every other error of the form's config inputs."""
    from .preview import check_all, merge

    inputs = form.config_inputs(config=config)
    found = check_all(**inputs) if inputs is not None else None
    return merge(first, found.errors if found else []), (found.override_keys if found else set())


@login_required
def run_new(request):
    """GET: the run form. POST: validate with the trainer's schema, save (optional) and launch; when
    refused, every error of the inputs is shown at once, each on its field."""
    from django.contrib import messages
    from django.shortcuts import redirect

    from .launch import ConfigInvalid, parse_config_text
    from .preview import FieldError
    from .services import RunInputInvalid, RunRefused

    form = _form(request, request.POST if request.method == "POST" else None)
    if request.method == "POST" and not form.is_valid():
        config = None
        try:
            if (form.data.get("config_yaml") or "").strip():
                config = parse_config_text(form.data["config_yaml"])
        except ConfigInvalid:
            pass  # the YAML's own error is shown once the form's fields are right
        errors, typed = _config_errors(form, config=config)
        _add_errors(form, errors, typed=typed)
    elif request.method == "POST":
        d = form.cleaned_data
        config, run = None, None
        try:
            if d.get("config_yaml", "").strip():
                config = parse_config_text(d["config_yaml"])
        except ConfigInvalid as exc:  # the YAML does not parse
            form.add_error(form.field_for_key(exc.key) or "config_yaml", f"{exc.key}: {exc.message}")
        try:
            if not form.errors:
                run = _save_and_launch(request, form, config)
        except RunInputInvalid as exc:
            errors, typed = _config_errors(form, FieldError(exc.field, str(exc)), config=config)
            _add_errors(form, errors, typed=typed)
        except RunRefused as exc:
            form.add_error(None, str(exc))
        if run is not None:
            from .preview import warnings

            messages.success(request, f"Run “{run.name}” is {run.status}.")
            for w in warnings(run.config):  # launched anyway: a warning never refuses a run
                messages.warning(request, f"{w['field']}: {w['message']}")
            return redirect("telemetry:run", run_id=run.pk)
    return render(request, "runs/run_form.html", {"form": form}, status=400 if form.errors else 200)


def _save_and_launch(request, form, config):
    """The form's run (and its saved config when `save_as` is given), in one transaction; once it
    commits, the launch's queue pass (`run_launch_admit`), outside that transaction."""
    from .services import RunInputInvalid, run_config_save, run_launch_admit
    from .services import run_new as service_run_new

    d = form.cleaned_data
    inputs = form.config_inputs(config=config)
    with transaction.atomic():
        if d.get("save_as"):
            try:
                run_config_save(owner=request.user, name=d["save_as"], config=config or inputs["base"],
                                preset=d["preset"], overrides=form.override_list(), gpus=d["gpus"],
                                adapt=not config and not inputs["base"])
            except RunInputInvalid as exc:
                if exc.field == "name":  # the saved config's name is the form's save_as
                    raise RunInputInvalid(str(exc), field="save_as") from None
                raise
        run = service_run_new(
            owner=request.user, name=d["name"], dataset=d["dataset"], val_dataset=d.get("val_dataset"),
            model=d["model"], gpus=d["gpus"], preset=d["preset"], config=config, saved=inputs["base"],
            overrides=inputs["overrides"], tool_set=d.get("tool_set") or "",
            reward_model=d.get("reward_model"), admit=False, project=d.get("project"),
            tags=form.tag_list(), retention=form.retention(),
        )
    return run_launch_admit(run=run, by=request.user)


@login_required
def run_new_preview(request):
    """POST (the form's fields, as the form posts them): JSON with every error of the inputs (each with
    the form field it belongs on), the trainer's warnings, the preset's adaptations to the GPUs or CPU, the
    effective config as YAML lines marked where they differ from the preset, and the memory estimate per
    device; GPUs more than the user's quota allows at once are an error on `gpus` (the launch would
    refuse them), more than the cluster has in all now a warning on it (the run would wait, queued,
    for GPUs to join; Ray's answer is cached a few seconds, so editing does not ask it each time). Nothing is stored; the form's script (static/js/run_form.js)
    calls it as the user edits."""
    from django.http import HttpResponseNotAllowed, JsonResponse

    from .launch import ConfigInvalid, parse_config_text
    from .preview import FieldError, preview
    from .services.cluster import gpus_cluster_warning, gpus_refusal

    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    form = _form(request, request.POST)
    form.is_valid()
    errors = [FieldError(name, message) for name, items in form.errors.as_data().items() for e in items
              if e.code != "required" for message in e.messages]  # nothing typed yet is no error yet
    config = None
    if (form.data.get("config_yaml") or "").strip():
        try:
            config = parse_config_text(form.data["config_yaml"])
        except ConfigInvalid as exc:
            errors.append(FieldError(exc.key, exc.message, "config"))
    inputs = form.config_inputs(config=config)
    body = {"errors": [], "warnings": [], "adapted": [], "lines": [], "yaml": "", "memory": None, "resources": "",
            "reference": ""}
    typed: set[str] = set()
    if inputs is not None and not any(e.source == "config" for e in errors):
        body = preview(**inputs, adapt=True)
        typed = {line.split("=", 1)[0].strip() for line in inputs["overrides"] if isinstance(line, str)}
        errors += [FieldError(e["field"], e["message"], e.get("source", "")) for e in body["errors"]]
    gpus = getattr(form, "cleaned_data", {}).get("gpus")
    if gpus and (why := gpus_refusal(user=request.user, gpus=gpus)):
        errors.append(FieldError("gpus", why))
    elif gpus and (why := gpus_cluster_warning(gpus=gpus)):
        body["warnings"] = [*body["warnings"], {"field": "gpus", "message": why}]
    body["errors"] = [{"field": e.field, "message": e.message,
                       "form_field": e.field if e.field in form.fields else
                       form.field_for_error(e.field, source=e.source, typed=typed)} for e in errors]
    return JsonResponse(body)


@login_required
def quota_page(request):
    """The caller's quota and usage, with their queued runs' positions and reasons."""
    from .services.queue_registry import quota_policy

    return render(request, "runs/quota.html", {"usage": quota_policy().usage_for(user=request.user)})
