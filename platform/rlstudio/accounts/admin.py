"""Admin pages of the accounts app: tokens (read-only: keys are never stored), the audit log
(append-only), and teams, Django's auth groups under the platform's name.

Teams replace Django's "Groups" page with "Teams" (`Team`, the Group proxy): a team's page sets its
name and members (and, folded away, Django's admin permissions, which a group has always given its
members); the user's page lists their teams. A team's creation and renaming, every change of who is in
it, and its deletion go through `accounts.teams` (audited; the sockets of whoever joined or left check
their access again).
"""
from django import forms
from django.contrib import admin
from django.contrib.admin.widgets import FilteredSelectMultiple
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.db.models import Count
from django.utils.html import format_html

from .models import ApiToken, AuditEvent, Team
from .teams import clean_team_name, team_delete, team_save, team_set_members, user_set_teams


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["key_prefix", "name", "user", "created", "last_used"]
    list_filter = ["created", "last_used"]
    search_fields = ["name", "key_prefix", "user__username"]
    readonly_fields = ["user", "name", "key_prefix", "key_hash", "created", "last_used"]

    def has_add_permission(self, request) -> bool:
        return False  # a key is created by its owner (profile page or `manage.py api_token`)


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["time", "actor", "action", "object_type", "object_id"]
    list_filter = ["action", "object_type", "time"]
    search_fields = ["action", "object_type", "object_id", "actor__username"]
    readonly_fields = ["time", "actor", "action", "object_type", "object_id", "data"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # the audit log is append-only


class MembersPicker(FilteredSelectMultiple):
    """Django's two-box picker in a wrapper of its own (the one the admin puts around its model fields'
    pickers). The picker's script moves the picker to the front of the select's parent element; a form's
    own field has no wrapper, so that parent was the form row and the picker went before its label,
    which then sat on the right ("Members:" beside the "Chosen members" box)."""

    def render(self, name, value, attrs=None, renderer=None):
        return format_html('<div class="related-widget-wrapper">{}</div>',
                           super().render(name, value, attrs, renderer))


class TeamAdminForm(forms.ModelForm):
    """A team's name (stripped, no control characters, unique) and its members, every user listed."""

    members = forms.ModelMultipleChoiceField(
        queryset=get_user_model().objects.order_by("username"), required=False,
        widget=MembersPicker("members", is_stacked=False),
        help_text="Every member reads the runs and projects shared with the team, for as long as they are one.")

    class Meta:
        model = Team
        fields = ["name", "members", "permissions"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["members"].initial = list(self.instance.user_set.values_list("pk", flat=True))

    def clean_name(self):
        try:
            return clean_team_name(self.cleaned_data.get("name"))
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


admin.site.unregister(Group)


@admin.register(Team)
class TeamAdmin(GroupAdmin):
    form = TeamAdminForm
    list_display = ["name", "member_count"]
    search_fields = ["name", "user__username"]
    fieldsets = [(None, {"fields": ["name", "members"]}),
                 ("Admin permissions (Django's, given to every member)",
                  {"fields": ["permissions"], "classes": ["collapse"]})]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(member_count=Count("user", distinct=True))

    @admin.display(description="members", ordering="member_count")
    def member_count(self, team) -> int:
        return team.member_count

    def save_model(self, request, obj, form, change):
        team_save(team=obj, by=request.user)

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        team_set_members(team=form.instance, members=form.cleaned_data["members"], by=request.user)

    def delete_model(self, request, obj):
        team_delete(team=obj, by=request.user)

    def delete_queryset(self, request, queryset):
        for team in queryset:
            team_delete(team=team, by=request.user)


admin.site.unregister(get_user_model())


class TeamListFilter(admin.RelatedFieldListFilter):
    """The user list's filter on Django's `groups` field, titled by the platform's name for them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.title = "teams"


@admin.register(get_user_model())
class TeamAwareUserAdmin(UserAdmin):
    """Django's user admin, whose groups are called teams (the form's field, its picker, the list's
    filter) and are set through `user_set_teams`."""

    list_filter = [("groups", TeamListFilter) if name == "groups" else name for name in UserAdmin.list_filter]

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        if db_field.name == "groups":
            kwargs.setdefault("widget", FilteredSelectMultiple("teams", is_stacked=False))
        field = super().formfield_for_manytomany(db_field, request, **kwargs)
        if db_field.name == "groups" and field is not None:
            field.label = "Teams"
            field.help_text = ("The user reads every run and project shared with these teams; staff set "
                               "a team's members on its own page too.")
        return field

    def save_related(self, request, form, formsets, change):
        teams = form.cleaned_data.pop("groups", None)  # set below, audited, not by the form
        super().save_related(request, form, formsets, change)
        if teams is not None:
            user_set_teams(user=form.instance, teams=teams, by=request.user)
