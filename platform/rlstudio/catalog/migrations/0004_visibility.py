# Issue 14, sharing: datasets and models carry a visibility (private by default).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('catalog', '0003_dataset_upload_fields'),
    ]

    operations = [
        migrations.AddField(
            model_name='dataset',
            name='visibility',
            field=models.CharField(choices=[('private', 'private'), ('everyone', 'everyone')], default='private', help_text='private: its owner (and staff) only; everyone: every user may read it and launch runs on it.', max_length=8),
        ),
        migrations.AddField(
            model_name='modelasset',
            name='visibility',
            field=models.CharField(choices=[('private', 'private'), ('everyone', 'everyone')], default='private', help_text='private: its owner (and staff) only; everyone: every user may read it and launch runs from it.', max_length=8),
        ),
        migrations.AddConstraint(
            model_name='dataset',
            constraint=models.CheckConstraint(condition=models.Q(('visibility__in', ['private', 'everyone'])), name='dataset_visibility_valid'),
        ),
        migrations.AddConstraint(
            model_name='modelasset',
            constraint=models.CheckConstraint(condition=models.Q(('visibility__in', ['private', 'everyone'])), name='modelasset_visibility_valid'),
        ),
    ]
