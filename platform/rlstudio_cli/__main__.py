"""`python -m rlstudio_cli ...`: the `rlstudio` command without installing it (PYTHONPATH=platform)."""
import sys

from .main import main

sys.exit(main())
