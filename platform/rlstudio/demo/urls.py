"""The demo's one route: the "Launch the demo" button's POST (under /runs/)."""
from django.urls import path

from . import views

app_name = "demo"

urlpatterns = [
    path("demo/launch/", views.demo_launch_view, name="launch"),
]
