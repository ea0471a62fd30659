"""API routes of the playground, included by rlstudio.api.urls."""
from django.urls import path

from . import api

urlpatterns = [
    path("playground/sessions/", api.SessionsView.as_view(), name="playground-sessions"),
    path("playground/sessions/<int:session_id>/", api.SessionDetailView.as_view(), name="playground-session"),
    path("playground/sessions/<int:session_id>/stop/", api.SessionStopView.as_view(), name="playground-session-stop"),
]
