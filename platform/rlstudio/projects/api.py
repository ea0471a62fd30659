"""API views of projects (docs/api.md "Projects"): /api/v1/projects/ (list, create), /projects/{id}/
(GET, PATCH name and description, DELETE: the runs stay, out of any project), /projects/{id}/sharing/
(GET, PUT: the lists of users and teams; PATCH: names added and taken away). Views only translate
HTTP to the services: ProjectInputInvalid is a 400 naming the field, ProjectNotPermitted a 403 (a user the project is shared with reads it only); a project the caller
does not see is a 404. A project's runs are GET /api/v1/runs/?project=<id>."""
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status as http
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from rlstudio.api.errors import ApiError
from rlstudio.api.params import ListParamsMixin
from rlstudio.runs.serializers import SharingChangeSerializer

from .errors import ProjectInputInvalid, ProjectNotPermitted
from .selectors import PROJECT_SCOPES, project_get_for, project_list_for, project_shared_teams, project_shared_users
from .serializers import ProjectSerializer, ProjectSharingSerializer, ProjectWriteSerializer
from .services import check_can_manage_project, project_create, project_delete, project_share, project_update


def _invalid(exc: ProjectInputInvalid) -> ApiError:
    return ApiError(str(exc), code="invalid", field=exc.field)


def _only(data, allowed: set[str]) -> None:
    extra = sorted(set(data) - allowed) if hasattr(data, "keys") else []
    if extra:
        raise ApiError(f"{extra[0]!r} is not a field of a project here (allowed: {', '.join(sorted(allowed))})",
                       field=extra[0])


class ProjectViewSet(ListParamsMixin, viewsets.ReadOnlyModelViewSet):
    """The projects the caller sees (their own, those shared with them; staff: everyone's), newest
    first; POST creates one, PATCH renames or describes, DELETE deletes it (its runs stay)."""

    list_parameters = [OpenApiParameter("scope", str, enum=["mine", "shared"], required=False,
                                        description="Only the caller's own projects, or only those shared with them.")]

    serializer_class = ProjectSerializer
    lookup_value_regex = r"\d+"
    http_method_names = ["get", "post", "put", "patch", "delete", "head", "options"]

    def handle_exception(self, exc):
        if isinstance(exc, ProjectNotPermitted):
            exc = ApiError(exc.message, code="permission_denied", status_code=http.HTTP_403_FORBIDDEN)
        elif isinstance(exc, ProjectInputInvalid):
            exc = _invalid(exc)
        return super().handle_exception(exc)

    def get_queryset(self):
        scope = self.request.query_params.get("scope") or "" if self.action == "list" else ""
        if scope not in PROJECT_SCOPES:
            raise ApiError(f"unknown scope {scope!r}; one of: mine, shared (or empty: all)", field="scope")
        return project_list_for(user=self.request.user, scope=scope).prefetch_related("shared_with", "shared_with_teams")

    def _project(self, pk):
        return project_get_for(user=self.request.user, project_id=pk)

    def _answer(self, project, code=http.HTTP_200_OK):
        fresh = project_get_for(user=self.request.user, project_id=project.pk)
        return Response(ProjectSerializer(fresh, context=self.get_serializer_context()).data, status=code)

    @extend_schema(request=ProjectWriteSerializer, responses={201: ProjectSerializer})
    def create(self, request):
        """A new project of the caller (400 on `name` for a name they use already or past their
        RLSTUDIO_MAX_PROJECTS_PER_USER)."""
        _only(request.data, {"name", "description"})
        s = ProjectWriteSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        if "name" not in s.validated_data:
            raise ApiError("name is required", field="name")
        project = project_create(owner=request.user, name=s.validated_data["name"],
                                 description=s.validated_data.get("description", ""))
        return self._answer(project, http.HTTP_201_CREATED)

    @extend_schema(request=ProjectWriteSerializer, responses={200: ProjectSerializer})
    def partial_update(self, request, pk=None):
        """Rename and/or describe the project (owner or staff; audited)."""
        project = self._project(pk)
        check_can_manage_project(user=request.user, project=project, action="edit")
        _only(request.data, {"name", "description"})
        s = ProjectWriteSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        project_update(project=project, by=request.user, **s.validated_data)
        return self._answer(project)

    @extend_schema(request=None, responses={204: None})
    def destroy(self, request, pk=None):
        """Delete the project (owner or staff; audited): its runs stay, out of any project."""
        project_delete(project=self._project(pk), by=request.user)
        return Response(status=http.HTTP_204_NO_CONTENT)

    @extend_schema(methods=["GET"], request=None, responses={200: ProjectSharingSerializer})
    @extend_schema(methods=["PUT"], request=ProjectSharingSerializer, responses={200: ProjectSharingSerializer})
    @extend_schema(methods=["PATCH"], request=SharingChangeSerializer, responses={200: ProjectSharingSerializer})
    @action(detail=True, methods=["get", "put", "patch"])
    def sharing(self, request, pk=None):
        """Whom the project, and every run in it, is shared with read-only: users and teams (owner or
        staff only; PUT replaces the lists it names, PATCH adds and takes away names at once; audited; a
        team the caller is not in, or none of that name, is a 400 on `teams` / `add_teams`)."""
        project = self._project(pk)
        check_can_manage_project(user=request.user, project=project, action="see or change the sharing of")
        if request.method == "PUT":
            s = ProjectSharingSerializer(data=request.data)
            s.is_valid(raise_exception=True)
            if "users" not in s.validated_data and "teams" not in s.validated_data:
                raise ApiError("users is required (the whole list of usernames; or teams, of team names)",
                               field="users")
            project_share(project=project, by=request.user, users=s.validated_data.get("users"),
                          teams=s.validated_data.get("teams"))
        elif request.method == "PATCH":
            s = SharingChangeSerializer(data=request.data)
            s.is_valid(raise_exception=True)
            d = s.validated_data
            try:
                project_share(project=project, by=request.user, add=d.get("add_users") or (),
                              remove=d.get("remove_users") or (), add_teams=d.get("add_teams") or (),
                              remove_teams=d.get("remove_teams") or ())
            except ProjectInputInvalid as exc:  # only what is added is checked: name the field it came in
                raise ApiError(str(exc), code="invalid", field=SharingChangeSerializer.field_of(exc.field)) from None
        return Response({"users": project_shared_users(project=project),
                         "teams": project_shared_teams(project=project)})


__all__ = ["ProjectViewSet"]
