"""The staff quota page's form: a user picked by name, and their limits (GPUs, runs, dataset storage)."""
from django import forms
from django.contrib.auth import get_user_model


class UserByNameField(forms.ModelChoiceField):
    """A select of active users, each shown and posted by username (never a raw id box)."""

    def label_from_instance(self, obj) -> str:
        return obj.get_username()


def _users():
    model = get_user_model()
    return model.objects.filter(is_active=True).order_by(model.USERNAME_FIELD)


class QuotaForm(forms.Form):
    """Set one user's own quota (`rlstudio.quotas.services.quota_set`)."""

    user = UserByNameField(queryset=_users(), to_field_name=get_user_model().USERNAME_FIELD,
                           empty_label="— pick a user —")
    max_gpus = forms.IntegerField(min_value=0, label="GPUs at once")
    gpu_hours_per_month = forms.FloatField(min_value=0, label="GPU-hours a month")
    max_concurrent_runs = forms.IntegerField(min_value=0, label="Concurrent runs")
    max_queued_runs = forms.IntegerField(min_value=0, label="Queued runs")
    dataset_storage_gb = forms.FloatField(min_value=0, required=False, label="Dataset storage (GB)",
                                          help_text="10^9 bytes; 0 = no new uploads; empty = unchanged")
