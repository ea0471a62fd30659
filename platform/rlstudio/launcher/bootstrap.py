"""Django-side setup run by the launcher as a child process, under the launcher's environment:
apply migrations, then create or update the demo admin (staff + superuser).

Run: `python -m rlstudio.launcher.bootstrap` with DJANGO_SETTINGS_MODULE, DATABASE_URL, … set and
the password in RLSTUDIO_ADMIN_PASSWORD (never on the command line, where `ps` would show it).
"""
from __future__ import annotations

import os
import sys


def main() -> int:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=1)
    username = os.environ.get("RLSTUDIO_ADMIN_USER") or "admin"
    password = os.environ.get("RLSTUDIO_ADMIN_PASSWORD")
    if not password:
        print("RLSTUDIO_ADMIN_PASSWORD is not set: the launcher passes it", file=sys.stderr)
        return 2
    user_model = get_user_model()
    user, created = user_model.objects.get_or_create(**{user_model.USERNAME_FIELD: username})
    user.is_staff = True
    user.is_superuser = True
    user.is_active = True
    user.set_password(password)
    user.save()
    print(f"admin user {username!r} {'created' if created else 'updated'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
