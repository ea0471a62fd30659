#!/usr/bin/env python
"""Django's command-line utility for RL Studio. Sets the settings module; nothing else."""
import os
import sys
from pathlib import Path


def main() -> None:
    # platform/ is a source root, not a package: put it on the path (after the stdlib).
    sys.path.insert(1, str(Path(__file__).resolve().parent / "platform"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rlstudio.config.settings.local")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
