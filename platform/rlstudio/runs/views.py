"""Pages of the runs app: the runs list (home page: filters, sorting, runs picked to compare), the
launch form, a run's controls (stop, resume, clone, fork, delete), its tags and note, and whom it is
shared with."""
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

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
    run_get_for,
    run_list_for,
    runs_sorted,
)


# The session key of a refused tags-and-note form: what was typed, shown again by the run page.
ANNOTATE_DRAFT = "run_annotate_draft"


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


def _control(request, run_id: int, do):
    """POST-only handler shell: the run must be visible (else 404) and the user its owner or staff
    (else 403: a run shared with them is read-only); refusals become messages."""
    from django.contrib import messages
    from django.http import HttpResponseNotAllowed
    from django.shortcuts import redirect

    from .services import RunInputInvalid, RunNotPermitted, RunRefused

    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    run = run_get_for(user=request.user, run_id=run_id)
    try:
        target = do(run)
    except RunNotPermitted as exc:
        raise PermissionDenied(exc.message) from None
    except (RunRefused, RunInputInvalid) as exc:
        messages.error(request, str(exc))
        target = run
    return redirect("telemetry:run", run_id=target.pk)


@login_required
@require_POST
def run_annotate_view(request, run_id: int):
    """POST `tags` (separated by spaces or commas) and `note`: the run page's tags-and-note form. A
    refused one leaves what was typed in the session (ANNOTATE_DRAFT) for the run page's form."""
    from django.contrib import messages

    from .services import RunInputInvalid, run_annotate

    typed = {"tags": request.POST.get("tags", ""), "note": request.POST.get("note", "")}
    tags = [t for t in typed["tags"].replace(",", " ").split() if t]

    def do(run):
        try:
            run_annotate(run=run, by=request.user, tags=tags, note=typed["note"])
        except RunInputInvalid:
            request.session[ANNOTATE_DRAFT] = {"run": run.pk, **typed}
            raise
        messages.success(request, "Tags and note saved.")
        return run

    return _control(request, run_id, do)


@login_required
@require_POST
def run_project_view(request, run_id: int):
    """POST `project` (an id of one of the run owner's projects, or empty: out of its project): the run
    page's "Move to project" control (owner or staff)."""
    from django.contrib import messages

    from .services import RunInputInvalid, run_set_project

    raw = (request.POST.get("project") or "").strip()

    def do(run):
        try:
            project_id = int(raw) if raw else None
        except ValueError:
            raise RunInputInvalid(f"project must be a project id, got {raw[:40]!r}", field="project") from None
        run_set_project(run=run, by=request.user, project_id=project_id)
        messages.success(request, "Moved into the project." if project_id else "Taken out of its project.")
        return run

    return _control(request, run_id, do)


@login_required
@require_POST
def run_share_view(request, run_id: int):
    """POST the run page's sharing forms: `visibility` (private | everyone), `add` (a username to
    share with) and/or `remove` (a username to stop sharing with)."""
    from django.contrib import messages

    from .services import run_share

    visibility = request.POST.get("visibility") or None
    add = [request.POST["add"].strip()] if request.POST.get("add", "").strip() else []
    remove = [request.POST["remove"]] if request.POST.get("remove") else []

    def do(run):
        run_share(run=run, by=request.user, visibility=visibility, add=add, remove=remove)
        if add:
            messages.success(request, f"Shared with {add[0]} (read-only).")
        elif remove:
            messages.success(request, f"No longer shared with {remove[0]}.")
        elif visibility:
            messages.success(request, "Shared with everyone (read-only)." if visibility == "everyone"
                             else "No longer shared with everyone.")
        return run

    return _control(request, run_id, do)


@login_required
def run_stop_view(request, run_id: int):
    from .services import run_stop

    # An unticked "save a checkpoint first" box is absent from the POST: then the run is killed now.
    checkpoint = request.POST.get("checkpoint") == "1"
    force = request.POST.get("force") == "1"
    return _control(request, run_id,
                    lambda run: run_stop(run=run, by=request.user, checkpoint=checkpoint, force=force))


@login_required
def run_resume_view(request, run_id: int):
    from .services import run_resume

    return _control(request, run_id, lambda run: run_resume(run=run, by=request.user))


@login_required
def run_clone_view(request, run_id: int):
    from .services import run_clone

    return _control(request, run_id, lambda run: run_clone(run=run, by=request.user))


# The Fork form's "further changes" textarea: at most this many key=value lines.
MAX_FORK_LINES = 100


def fork_form_overrides(post) -> list[str]:
    """The Fork form's changes as `key=value` overrides: each input of FORK_FORM_FIELDS that is not
    empty, then each line of the `overrides` textarea (blank lines and `#` comments skipped); a line
    without `=` is RunInputInvalid on `overrides`."""
    from .selectors import FORK_FORM_FIELDS
    from .services import RunInputInvalid

    out = [f"{key}={post.get(name).strip()}" for name, key, _label in FORK_FORM_FIELDS
           if (post.get(name) or "").strip()]
    lines = [line.strip() for line in (post.get("overrides") or "").splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    if len(lines) > MAX_FORK_LINES:
        raise RunInputInvalid(f"at most {MAX_FORK_LINES} key=value lines", field="overrides")
    for line in lines:
        if "=" not in line:
            raise RunInputInvalid(f"{line[:80]!r} is not key=value", field="overrides")
        out.append(line)
    return out


@login_required
@require_POST
def run_fork_view(request, run_id: int):
    """POST the run page's Fork form: `step` (a kept checkpoint's), `name` (optional), the inputs of
    FORK_FORM_FIELDS (empty: unchanged) and `overrides` (key=value lines). The new run's page, or back
    to this run's with a message naming the key refused (owner or staff; a reader gets 403)."""
    from django.contrib import messages

    from .services import RunInputInvalid, run_fork

    def do(run):
        try:
            new = run_fork(run=run, by=request.user, step=request.POST.get("step") or None,
                           name=(request.POST.get("name") or "").strip()[:200] or None,
                           overrides=fork_form_overrides(request.POST))
        except RunInputInvalid as exc:
            messages.error(request, f"Not forked: {exc.field}: {exc}")
            return run
        messages.success(request, f"Run “{new.name}” is {new.status}.")
        return new

    return _control(request, run_id, do)


@login_required
@require_POST
def run_delete_view(request, run_id: int):
    """POST: delete a finished run (the run page's Delete button, confirmed in the browser), then the
    runs list with a message; a refusal (RunRefused: what to do first) goes back to the run page."""
    from django.contrib import messages
    from django.shortcuts import redirect

    from .services import RunNotPermitted, RunRefused, run_delete

    run = run_get_for(user=request.user, run_id=run_id)
    try:
        run_delete(run=run, by=request.user)
    except RunNotPermitted as exc:
        raise PermissionDenied(exc.message) from None
    except RunRefused as exc:
        messages.error(request, f"Run “{run.name}” was not deleted: {exc}")
        return redirect("telemetry:run", run_id=run.pk)
    messages.success(request, f"Run “{run.name}” (#{run_id}) was deleted.")
    return redirect("runs:list")


def _picked_ids(values) -> list:
    """The run ids a form sent (`ids=1&ids=2`, or `ids=1,2`): each an integer, or the text as sent
    when it is not one (`clean_run_ids` then names it)."""
    ids: list = []
    for value in values:
        for part in str(value).split(","):
            part = part.strip()
            if part:
                ids.append(int(part) if part.isascii() and part.isdigit() and len(part) <= 40 else part[:40])
    return ids


@login_required
def run_bulk_delete_view(request):
    """The runs list's Delete selected. GET ?ids=…: the confirm page, naming each picked run and, for
    any that cannot be deleted, why (then nothing is offered but picking only those that can). POST
    `ids` (a CSRF-protected form): delete them all or none (`runs_delete`), then the runs list with
    what was deleted, or back to the confirm page saying why nothing was."""
    from django.contrib import messages
    from django.http import HttpResponseNotAllowed
    from django.shortcuts import redirect

    from .services import (
        RunInputInvalid,
        RunsNotDeleted,
        bulk_delete_max,
        bulk_delete_refusals,
        clean_run_ids,
        runs_delete,
    )

    if request.method not in ("GET", "POST"):
        return HttpResponseNotAllowed(["GET", "POST"])
    source = request.POST if request.method == "POST" else request.GET
    ids = _picked_ids(source.getlist("ids"))
    try:
        ids = clean_run_ids(ids)
    except RunInputInvalid as exc:
        if request.method == "POST":
            messages.error(request, f"Nothing was deleted: {exc}")
            return redirect("runs:list")
        return render(request, "runs/run_bulk_delete.html", {"error": str(exc), "limit": bulk_delete_max()},
                      status=400)
    if request.method == "POST":
        try:
            deleted = runs_delete(run_ids=ids, by=request.user)
        except RunsNotDeleted as exc:
            messages.error(request, f"Nothing was deleted: {len(exc.refusals)} of the {exc.total} runs "
                                    "cannot be deleted (below: why).")
            return redirect(f"{request.path}?{urlencode({'ids': ','.join(map(str, ids))})}")
        names = ", ".join(f"“{name}” (#{run_id})" for run_id, name in deleted)
        messages.success(request, f"{len(deleted)} run{'s' if len(deleted) != 1 else ''} deleted: {names}.")
        return redirect("runs:list")
    refusals = {r.run_id: r for r in bulk_delete_refusals(run_ids=ids, by=request.user)}
    shown = {r.pk: r for r in run_list_for(user=request.user).filter(pk__in=ids)}
    items = [{"id": run_id, "run": shown.get(run_id), "refusal": refusals.get(run_id)} for run_id in ids]
    deletable = [run_id for run_id in ids if run_id not in refusals]
    return render(request, "runs/run_bulk_delete.html", {
        "items": items, "refused": len(refusals), "ids": ",".join(map(str, ids)),
        "deletable_qs": urlencode({"ids": ",".join(map(str, deletable))}) if deletable else "",
        "deletable_count": len(deletable),
    })


@login_required
@require_GET
def run_controls_view(request, run_id: int):
    """GET: the run page's controls card (badge, progress, buttons) as it is now, as an HTML fragment.

    The run page refreshes its controls from this while the run is live and whenever a status event
    arrives: a stop asked for, a reconcile that found the job gone, a force stop whose killed trainer
    reports nothing, all change the buttons without a reload. Owner or staff only (404 otherwise)."""
    from .selectors import run_header_context

    run = run_get_for(user=request.user, run_id=run_id)
    return render(request, "runs/_controls.html", run_header_context(run=run, user=request.user))


@login_required
def quota_page(request):
    """The caller's quota and usage, with their queued runs' positions and reasons."""
    from .services.queue_registry import quota_policy

    return render(request, "runs/quota.html", {"usage": quota_policy().usage_for(user=request.user)})
