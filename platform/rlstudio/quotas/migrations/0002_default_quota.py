"""Create the default GPU quota (applies to every user without a quota of their own)."""
from django.db import migrations


def create_default(apps, schema_editor):
    GpuQuota = apps.get_model("quotas", "GpuQuota")
    if not GpuQuota.objects.filter(is_default=True).exists():
        GpuQuota.objects.create(is_default=True, user=None, max_gpus=1, gpu_hours_per_month=100.0, max_concurrent_runs=2)


def delete_default(apps, schema_editor):
    apps.get_model("quotas", "GpuQuota").objects.filter(is_default=True).delete()


class Migration(migrations.Migration):
    dependencies = [("quotas", "0001_initial")]
    operations = [migrations.RunPython(create_default, delete_default)]
