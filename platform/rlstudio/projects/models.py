"""Records of the projects app: a project is a named group of one user's runs (`Run.project`), which
its owner may share read-only with named users and teams (whose members then read every run in it, added
later too)."""
from django.conf import settings
from django.db import models

# A project's name and description (rlstudio.projects.services checks them).
MAX_PROJECT_NAME_LENGTH = 100
MAX_PROJECT_DESCRIPTION_LENGTH = 10_000


class Project(models.Model):
    """A named group of runs of one owner; its runs point at it (`Run.project`, SET_NULL on delete)."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="projects")
    name = models.CharField(max_length=MAX_PROJECT_NAME_LENGTH)
    description = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)
    shared_with = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="projects_shared_with_me",
        help_text="Users who read every run of the project (read-only, as a run share); only the owner "
                  "and staff change it.",
    )
    shared_with_teams = models.ManyToManyField(
        "auth.Group", blank=True, related_name="projects_shared_with_team",
        help_text="Teams whose members read every run of the project (as the users above), for as long "
                  "as they are members; only the owner and staff change it.",
    )

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [models.UniqueConstraint(fields=["owner", "name"], name="project_owner_name_unique")]

    def __str__(self) -> str:
        return self.name
