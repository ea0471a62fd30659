"""Admin pages of projects. Every change goes through the projects' services, as a change on the
pages or the API does: it is checked, audited, and tells the open websockets of the runs whose readers
it changes. The change form renames and describes (`project_update`) and shares (`project_share`, with
the users added and removed); a delete, one or a selection, is `project_delete` (the runs stay, in no
project). There is no add form: a project is made by its owner (its page or the API, where their cap
is counted), and its owner never changes (a project holds its owner's runs). Runs are moved on the run."""
from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db.models import Q

from .errors import ProjectInputInvalid
from .models import Project
from .services import clean_description, clean_name, project_delete, project_share, project_update


class ProjectAdminForm(forms.ModelForm):
    """The change form's checks are the services': a name and a description as `project_update` takes
    them, a name free among the owner's other projects, and a share with active users other than the
    owner (a user already in it stays listed if made inactive since, so the form still saves)."""

    class Meta:
        model = Project
        fields = ["name", "description", "shared_with", "shared_with_teams"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        project = self.instance
        if "shared_with" in self.fields and project.pk:
            current = project.shared_with.values("pk")
            self.fields["shared_with"].queryset = (
                get_user_model().objects.filter(Q(is_active=True) | Q(pk__in=current))
                .exclude(pk=project.owner_id).order_by("username"))

    def clean_name(self):
        try:
            name = clean_name(self.cleaned_data.get("name"))
        except ProjectInputInvalid as exc:
            raise forms.ValidationError(str(exc)) from None
        others = Project.objects.filter(owner_id=self.instance.owner_id, name=name).exclude(pk=self.instance.pk)
        if others.exists():
            raise forms.ValidationError(f"{self.instance.owner.get_username()} already has a project named {name!r}")
        return name

    def clean_description(self):
        try:
            return clean_description(self.cleaned_data.get("description") or "")
        except ProjectInputInvalid as exc:
            raise forms.ValidationError(str(exc)) from None


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    form = ProjectAdminForm
    list_display = ["id", "name", "owner", "created"]
    list_filter = ["created"]
    search_fields = ["name", "description", "owner__username"]
    fields = ["owner", "name", "description", "shared_with", "shared_with_teams", "created"]
    readonly_fields = ["owner", "created"]
    filter_horizontal = ["shared_with", "shared_with_teams"]

    def has_add_permission(self, request) -> bool:
        return False

    def save_model(self, request, obj, form, change):
        project_update(project=obj, by=request.user, name=form.cleaned_data["name"],
                       description=form.cleaned_data["description"])

    def save_related(self, request, form, formsets, change):
        project = form.instance
        before = set(project.shared_with.values_list("username", flat=True))
        after = {user.get_username() for user in form.cleaned_data["shared_with"]}
        teams_before = set(project.shared_with_teams.values_list("name", flat=True))
        teams_after = {team.name for team in form.cleaned_data["shared_with_teams"]}
        project_share(project=project, by=request.user, add=sorted(after - before), remove=sorted(before - after),
                      add_teams=sorted(teams_after - teams_before), remove_teams=sorted(teams_before - teams_after))

    def delete_model(self, request, obj):
        project_delete(project=obj, by=request.user)

    def delete_queryset(self, request, queryset):
        for project in queryset.select_related("owner"):
            project_delete(project=project, by=request.user)
