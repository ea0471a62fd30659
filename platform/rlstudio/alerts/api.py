"""API views of alerts (/api/v1/alerts/..., /api/v1/runs/{id}/alerts/): a user's rules, the
catalogue, their notifications and settings, the operators' webhook names, a run's firings and budget.

Everything is the caller's own: another user's rule is a 404. AlertInvalid becomes a 400 naming the
field (the one error envelope, rlstudio.api.errors)."""
from __future__ import annotations

from dataclasses import asdict

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from rlstudio.api.errors import ApiError
from rlstudio.api.params import DEFAULT_LIMIT, LIMIT_SCHEMA, MAX_LIMIT, bool_param, int_param, list_params
from rlstudio.runs.selectors import can_manage
from rlstudio.text import nul_path

from . import rules as R
from . import selectors as sel
from .serializers import (AlertRuleSerializer, AlertRuleWriteSerializer, CatalogueEntrySerializer, FiringSerializer,
                          NotificationReadSerializer, NotificationSerializer, SettingsSerializer, WebhookSerializer)
from .services import (AlertInvalid, email_enabled, notifications_mark_read, rule_create, rule_delete, rule_update,
                       settings_update)


def _invalid(exc: AlertInvalid) -> ApiError:
    return ApiError(exc.message, code="invalid", field=exc.field)


def _body(request) -> dict:
    """The JSON object sent; its values are read as they are (no serializer), so a NUL character in any
    of its texts, which PostgreSQL refuses, is refused here naming the field."""
    if not isinstance(request.data, dict):
        raise ApiError("the body must be a JSON object", code="invalid")
    where = nul_path(request.data)
    if where is not None:
        raise ApiError(f"{where} must not contain the NUL character (U+0000)", code="invalid", field=where)
    return dict(request.data)


class AlertRuleListView(APIView):
    """Your alert rules: defaults (run null) and per-run ones."""

    @list_params(OpenApiParameter("run", int, required=False, description="Only this run's own rules."),
                 OpenApiParameter("defaults", bool, required=False,
                                  description="Only your defaults (rules without a run)."),
                 paged=False, responses=AlertRuleSerializer(many=True), operation_id="alerts_rules_list")
    def get(self, request):
        run = None
        if request.query_params.get("run"):
            run = sel.own_run_for(user=request.user, run_id=request.query_params["run"])
        defaults = bool(bool_param(request.query_params, "defaults"))
        rules = sel.rules_for(user=request.user, run=run, defaults_only=defaults)
        return Response(AlertRuleSerializer(rules, many=True).data)

    @extend_schema(request=AlertRuleWriteSerializer, responses={201: AlertRuleSerializer},
                   operation_id="alerts_rules_create")
    def post(self, request):
        data = _body(request)
        run = None
        if data.get("run") is not None:
            try:
                run = sel.own_run_for(user=request.user, run_id=data.pop("run"))
            except Http404:
                raise ApiError("no such run of yours", code="invalid", field="run") from None
        data.pop("run", None)
        if "kind" not in data:
            raise ApiError("kind is required", code="invalid", field="kind")
        try:
            rule = rule_create(owner=request.user, data=data, run=run)
        except AlertInvalid as exc:
            raise _invalid(exc) from None
        return Response(AlertRuleSerializer(rule).data, status=status.HTTP_201_CREATED)


class AlertRuleDetailView(APIView):
    @extend_schema(responses=AlertRuleSerializer, operation_id="alerts_rules_retrieve")
    def get(self, request, rule_id: int):
        """One of your alert rules."""
        return Response(AlertRuleSerializer(sel.rule_get_for(user=request.user, rule_id=rule_id)).data)

    @extend_schema(request=AlertRuleWriteSerializer, responses=AlertRuleSerializer,
                   operation_id="alerts_rules_partial_update")
    def patch(self, request, rule_id: int):
        """Change one of your alert rules: its threshold, window, actions, or whether it is on."""
        rule = sel.rule_get_for(user=request.user, rule_id=rule_id)
        data = _body(request)
        if "run" in data:
            raise ApiError("a rule's run cannot change; delete it and make another", code="invalid", field="run")
        try:
            rule = rule_update(rule=rule, by=request.user, data=data)
        except AlertInvalid as exc:
            raise _invalid(exc) from None
        return Response(AlertRuleSerializer(rule).data)

    @extend_schema(responses={204: None}, operation_id="alerts_rules_destroy")
    def delete(self, request, rule_id: int):
        """Delete one of your alert rules."""
        rule_delete(rule=sel.rule_get_for(user=request.user, rule_id=rule_id), by=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AlertCatalogueView(APIView):
    """The rule kinds, what each watches and their recommended thresholds."""

    @list_params(paged=False, responses=CatalogueEntrySerializer(many=True))
    def get(self, request):
        rows = [{**asdict(k), "recommended": k.kind in R.RECOMMENDED} for k in R.CATALOGUE.values()]
        return Response(CatalogueEntrySerializer(rows, many=True).data)


class NotificationListView(APIView):
    @list_params(  # no offset: the newest `limit`
        OpenApiParameter("unread", bool, required=False, description="Only the unread ones."),
        OpenApiParameter("limit", LIMIT_SCHEMA, required=False,
                         description=f"At most this many, newest first, 1 to {MAX_LIMIT} (default {DEFAULT_LIMIT}); "
                                     "another value is a 400 naming limit."),
        paged=False, responses=NotificationSerializer(many=True))
    def get(self, request):
        """Your notifications, newest first, with how many are unread."""
        limit = int_param(request.query_params, "limit", default=DEFAULT_LIMIT, minimum=1, maximum=MAX_LIMIT)
        unread = bool(bool_param(request.query_params, "unread"))
        rows = sel.notifications_for(user=request.user, unread=unread)[:limit]
        return Response({"unread": sel.unread_count(user=request.user),
                         "results": NotificationSerializer(rows, many=True).data})


class NotificationReadView(APIView):
    @extend_schema(request=NotificationReadSerializer, responses={200: OpenApiTypes.OBJECT})
    def post(self, request):
        """Mark some of your notifications read (ids), or all of them; answers how many are left unread."""
        data = _body(request)
        try:
            changed = notifications_mark_read(user=request.user, ids=data.get("ids"))
        except AlertInvalid as exc:
            raise _invalid(exc) from None
        return Response({"marked": changed, "unread": sel.unread_count(user=request.user)})


def _settings_json(user) -> dict:
    row = sel.settings_of(user=user)
    return {"routes": row.routes, "webhook": row.webhook.name if row.webhook_id else None,
            "email_enabled": email_enabled(), "email_address": user.email or ""}


class NotificationSettingsView(APIView):
    @extend_schema(responses=SettingsSerializer, operation_id="alerts_settings_retrieve")
    def get(self, request):
        """Where each run event reaches you: the page, e-mail, a registered webhook."""
        return Response(_settings_json(request.user))

    @extend_schema(request=SettingsSerializer, responses=SettingsSerializer, operation_id="alerts_settings_update")
    def put(self, request):
        """Change where each run event reaches you (routes) and the webhook chosen."""
        data = _body(request)
        try:
            settings_update(user=request.user, routes=data.get("routes"),
                            webhook=data["webhook"] if "webhook" in data else ...)
        except AlertInvalid as exc:
            raise _invalid(exc) from None
        return Response(_settings_json(request.user))


class WebhookListView(APIView):
    """The webhooks the operators registered, by name (users choose one; they never see its address)."""

    @list_params(paged=False, responses=WebhookSerializer(many=True))
    def get(self, request):
        return Response(WebhookSerializer(sel.webhooks_available(), many=True).data)


class RunAlertsView(APIView):
    """A run's firings (chart markers), its budget, and, for whoever controls it, the rules that apply."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT}, operation_id="runs_alerts")
    def get(self, request, run_id: int):
        run = sel.visible_run_for(user=request.user, run_id=run_id)
        budget = sel.run_budget(run=run)
        body = {"firings": FiringSerializer(sel.firings_for_run(run=run), many=True).data,
                "budget": {"gpus": budget.gpus, "gpu_hours": budget.gpu_hours, "cap": budget.cap,
                           "level": budget.level, "paused_by": budget.paused_by}}
        if can_manage(user=request.user, run=run) and run.owner_id == request.user.pk:
            from .services import run_rules

            body["rules"] = AlertRuleSerializer(run_rules(run, cached=False), many=True).data
        return Response(body)
