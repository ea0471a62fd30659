"""The chat template shipped with the tiny tokenizers (Qwen2.5-style ChatML with Hermes tool calls).

Rendering rules (tests/trainer/models/test_tiny_model.py pins the exact text):
- every turn is ``<|im_start|>{role}\\n{content}<|im_end|>\\n``;
- ``tools=`` schemas go into the system turn, one JSON object per line inside ``<tools></tools>``,
  after the system message's own content (if any); without tools and without a system message no
  system turn is rendered (no default system prompt: the tiny models have short contexts);
- an assistant turn with ``tool_calls`` (OpenAI shape ``{"type": "function", "function": {"name",
  "arguments"}}``, arguments a dict or a JSON string) renders each call as
  ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``, separated from the content and
  from each other by a newline;
- ``tool`` messages become one ``user`` turn per run of consecutive tool messages, each wrapped in
  ``<tool_response>\\n...\\n</tool_response>`` and separated by a newline;
- ``add_generation_prompt`` appends ``<|im_start|>assistant\\n``.

The template renders a conversation so that ``render(messages[:i], add_generation_prompt=True)`` is a
prefix of ``render(messages)`` whenever ``messages[i]`` is an assistant turn (the SFT mask and the
multi-turn rollout no longer need it: trainer.chat.deltas).
"""
from __future__ import annotations

# Kept short on purpose: every prompt of the demo carries it, and on 2 CPU cores the prompt
# tokens dominate the cost of SFT, rollout prefill and every log-prob pass.
TOOLS_PREAMBLE = "# Tools\n\nYou may call these functions:\n<tools>"
TOOLS_POSTAMBLE = (
    "\n</tools>\n\nTo call one, write:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)

# Jinja source. `tojson` is transformers' filter (json.dumps, ensure_ascii=False, default
# separators), so a schema renders exactly as Python's json.dumps(schema, ensure_ascii=False).
CHAT_TEMPLATE = (
    "{%- set ns = namespace(system='', start=0) -%}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set ns.system = messages[0]['content'] or '' -%}{%- set ns.start = 1 -%}"
    "{%- endif -%}"
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if ns.system -%}{{- ns.system + '\\n\\n' -}}{%- endif -%}"
    "{{- " + repr(TOOLS_PREAMBLE) + " -}}"
    "{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}"
    "{{- " + repr(TOOLS_POSTAMBLE) + " + '<|im_end|>\\n' -}}"
    "{%- elif ns.start == 1 -%}"
    "{{- '<|im_start|>system\\n' + ns.system + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages[ns.start:] -%}"
    "{%- set content = message['content'] if message['content'] is string else '' -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' + content -}}"
    "{%- for call in (message['tool_calls'] or []) -%}"
    "{%- set fn = call['function'] if call['function'] is defined else call -%}"
    "{%- if content or not loop.first -%}{{- '\\n' -}}{%- endif -%}"
    "{{- '<tool_call>\\n{\"name\": \"' + fn['name'] + '\", \"arguments\": ' -}}"
    "{%- if fn['arguments'] is string -%}{{- fn['arguments'] -}}"
    "{%- else -%}{{- fn['arguments'] | tojson -}}{%- endif -%}"
    "{{- '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- elif message['role'] == 'tool' -%}"
    "{%- if loop.first or loop.previtem['role'] != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' -}}"
    "{%- if loop.last or loop.nextitem['role'] != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
