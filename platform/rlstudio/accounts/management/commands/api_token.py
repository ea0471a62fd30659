"""`python manage.py api_token <username> [--name N]`: create a personal API token, print its key once."""
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from rlstudio.accounts.services import ApiTokenRefused, api_token_create


class Command(BaseCommand):
    help = "Create a personal API token for a user and print the key (shown only this once)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="A label for the token (e.g. 'ci').")

    def handle(self, *args, username: str, name: str, **options):
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: username})
        except User.DoesNotExist:
            raise CommandError(f"No user named {username!r}") from None
        try:
            created = api_token_create(user=user, name=name)
        except ApiTokenRefused as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(created.key)
