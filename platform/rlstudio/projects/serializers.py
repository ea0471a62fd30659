"""API representations of projects."""
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .models import Project
from .selectors import can_manage_project, project_access


class ProjectSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)
    run_count = serializers.IntegerField(read_only=True, help_text="Runs in the project.")
    access = serializers.SerializerMethodField(
        help_text="Why the caller sees the project: owner, staff, or shared (read-only).")
    shared_with = serializers.SerializerMethodField(
        help_text="Usernames the project is shared with (its owner and staff see them; empty for others).")
    shared_with_teams = serializers.SerializerMethodField(
        help_text="Names of the teams the project is shared with (its owner and staff see them; empty for others).")

    class Meta:
        model = Project
        fields = ["id", "name", "owner", "description", "created", "run_count", "access", "shared_with",
                  "shared_with_teams"]
        read_only_fields = fields

    def _user(self):
        return getattr(self.context.get("request"), "user", None)

    def get_access(self, project: Project) -> str:
        return project_access(user=self._user(), project=project)

    @extend_schema_field({"type": "array", "items": {"type": "string"}})
    def get_shared_with(self, project: Project) -> list[str]:
        user = self._user()
        if user is None or not can_manage_project(user=user, project=project):
            return []
        return sorted(u.get_username() for u in project.shared_with.all())

    @extend_schema_field({"type": "array", "items": {"type": "string"}})
    def get_shared_with_teams(self, project: Project) -> list[str]:
        user = self._user()
        if user is None or not can_manage_project(user=user, project=project):
            return []
        return sorted(team.name for team in project.shared_with_teams.all())


class ProjectWriteSerializer(serializers.Serializer):
    """POST (name required) and PATCH of /api/v1/projects/; the lengths and characters are the
    service's to check (it names the field)."""

    name = serializers.CharField(required=False, trim_whitespace=False, allow_blank=True,
                                 help_text="1 to 100 characters, unique among the owner's projects.")
    description = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False,
                                        help_text="Free text, at most 10000 characters.")


class ProjectSharingSerializer(serializers.Serializer):
    """GET / PUT /api/v1/projects/{id}/sharing/: whom the project (and every run in it) is shared with,
    users and teams."""

    users = serializers.ListField(child=serializers.CharField(), required=False, help_text=(
        "The whole list of usernames the project is shared with (replaces it); a PUT names `users`, "
        "`teams` or both."))
    teams = serializers.ListField(child=serializers.CharField(), required=False, help_text=(
        "The whole list of team names the project is shared with (replaces it): each a team the caller is "
        "in (staff: any team) or one it is shared with already; any other is a 400 on `teams`."))
