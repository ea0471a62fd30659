"""Entry point: `python -m rlstudio.launcher [--port N] [--no-ray] [--no-celery]`."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
