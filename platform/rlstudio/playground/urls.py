"""Page routes of the playground (included under /playground/)."""
from django.urls import path

from . import views

app_name = "playground"
urlpatterns = [
    path("", views.playground, name="page"),
]
