"""Configuration of the web side: environment, settings, URLs, ASGI and Celery apps."""
