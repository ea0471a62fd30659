"""``python -m trainer.config --markdown > docs/config-reference.md`` (the config reference) or
``python -m trainer.config --defaults`` (the default spec as JSON)."""

import sys

from .reference import main

sys.exit(main())
