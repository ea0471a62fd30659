"""Page routes of telemetry under /runs/<id>/: the live run page itself, its samples, groups and prompts;
runs compared side by side."""
from django.urls import path

from . import summary_views, views

app_name = "telemetry"

urlpatterns = [
    path("compare/", views.run_compare, name="compare"),  # runs side by side
    path("<int:run_id>/", views.run_detail, name="run"),  # the live run page
    path("<int:run_id>/summary/card/", summary_views.summary_card_view, name="summary_card"),  # fragment, refreshed live
    path("<int:run_id>/samples/<int:sample_id>/", views.sample_detail, name="sample"),
    path("<int:run_id>/groups/", views.group_detail, name="group"),
    path("<int:run_id>/prompts/", views.prompt_history, name="prompt"),
]
