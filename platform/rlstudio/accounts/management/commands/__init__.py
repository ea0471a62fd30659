"""`python manage.py api_token`."""
