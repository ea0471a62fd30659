"""RL Studio's GRPO engine: a library and a CLI that knows nothing of the web side.

Run it with ``python -m trainer run SPEC.json`` or ``python -m trainer run --recipe NAME key=value ...``.
Importing ``trainer`` (or ``trainer.config`` / ``trainer.events``) never loads torch.
"""

__version__ = "0.1.0"
