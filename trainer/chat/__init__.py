"""Chat templates as the trainer uses them: token deltas, format families, the template check.

    deltas.py    ChatDeltas: the ids a turn adds (turn end, tool replies, generation prompt) rendered
                 against a fixed base conversation, so no template needs to be prefix-stable; SFT
                 examples built the same way
    families.py  qwen2.5 / qwen3 / llama3 / chatml: detection from the template, parser, stop tokens
    check.py     check_template(tokenizer, tools=...) -> TemplateReport (family, parser, stop tokens,
                 what failed and why); what the platform's model registration runs

No torch and no Django here: only a tokenizer object (transformers) is needed.
"""
from trainer.chat.check import TemplateReport, check_template  # noqa: F401 - public names
from trainer.chat.deltas import ChatDeltas, TemplateError  # noqa: F401
from trainer.chat.families import FAMILIES, Family, detect_family, stop_token_ids  # noqa: F401
