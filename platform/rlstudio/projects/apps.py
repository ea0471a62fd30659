"""Django app config of `rlstudio.projects`: named groups of runs, opened as a page, filtered by,
compared, and shared read-only with named users."""
from django.apps import AppConfig


class ProjectsConfig(AppConfig):
    name = "rlstudio.projects"
    label = "projects"
    verbose_name = "Projects"
    default_auto_field = "django.db.models.BigAutoField"
