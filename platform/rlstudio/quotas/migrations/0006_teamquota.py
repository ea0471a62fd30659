"""Team GPU quotas: one optional row per team (Django auth group), the GPUs its members hold at once
and the GPU-hours they use a month, together."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('auth', '0012_alter_user_first_name_max_length'),
        ('quotas', '0005_gpuquota_dataset_storage_gb'),
    ]

    operations = [
        migrations.CreateModel(
            name='TeamQuota',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('max_gpus', models.IntegerField(default=8, help_text="GPUs the team's members hold at once, together.")),
                ('gpu_hours_per_month', models.FloatField(default=1000.0, help_text="GPU-hours the team's current members use in a calendar month (UTC), together.")),
                ('updated', models.DateTimeField(auto_now=True)),
                ('team', models.OneToOneField(help_text="The team (Django's auth group) whose members share these limits.", on_delete=django.db.models.deletion.CASCADE, related_name='team_quota', to='auth.group')),
            ],
            options={
                'verbose_name': 'team GPU quota',
                'constraints': [models.CheckConstraint(condition=models.Q(('max_gpus__gte', 0)), name='teamquota_max_gpus_nonneg'), models.CheckConstraint(condition=models.Q(('gpu_hours_per_month__gte', 0)), name='teamquota_gpu_hours_nonneg')],
            },
        ),
    ]
