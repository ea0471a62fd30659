"""The URL map of RL Studio: pages, admin, the API under /api/v1/, /healthz."""
from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.utils.functional import lazy
from django.views.generic import RedirectView

from rlstudio.accounts.urls import auth_urlpatterns
from rlstudio.api.errors import api_not_found
from rlstudio.health import healthz
from rlstudio.runs import views as run_views

urlpatterns = [
    path("", run_views.run_list, name="home"),
    path("healthz", healthz, name="healthz"),
    path("healthz/", RedirectView.as_view(url="/healthz")),
    # Pages that link no icon (the admin's, the API's own) make the browser ask for /favicon.ico.
    path("favicon.ico", RedirectView.as_view(url=lazy(static, str)("favicon.ico")), name="favicon"),
    *auth_urlpatterns,
    path("accounts/", include("rlstudio.accounts.urls")),
    path("runs/", include("rlstudio.runs.urls")),
    path("runs/", include("rlstudio.demo.urls")),  # the one-click demo's launch
    path("runs/", include("rlstudio.telemetry.urls")),  # samples, groups, prompts of a run (LIVE)
    path("runs/", include("rlstudio.exports.urls")),  # a checkpoint's export, asked for from the run page
    path("", include("rlstudio.evaluations.urls")),  # a run's and a model's Evaluations card, refreshed live
    path("", include("rlstudio.catalog.urls")),
    path("sweeps/", include("rlstudio.sweeps.urls")),  # grids of runs launched together
    path("projects/", include("rlstudio.projects.urls")),  # named groups of runs, shared read-only
    path("quotas/", include("rlstudio.quotas.urls")),  # the staff quota page
    path("alerts/", include("rlstudio.alerts.urls")),  # rules, notifications, their settings
    path("playground/", include("rlstudio.playground.urls")),  # chat with a model or a checkpoint
    path("admin/", admin.site.urls),
    path("api/v1/", include("rlstudio.api.urls")),
]


def handler404(request, exception=None):
    """JSON 404s under /api/, Django's page elsewhere."""
    if request.path.startswith("/api/"):
        return api_not_found(request, exception)
    from django.views.defaults import page_not_found

    return page_not_found(request, exception)
