"""The run form: dataset, model, preset, the important fields, whole-config YAML, dotted overrides.

The form only collects; `rlstudio.runs.services.run_new` validates the config with the trainer's
schema, and on a refusal `rlstudio.runs.preview.check_all` finds every error of the same inputs; the
view puts each on its field (`field_for_error`: an important field, the overrides or the YAML where
the key was typed). `config_inputs` are those inputs, for the service, the check and the preview.
"""
from __future__ import annotations

from django import forms

from rlstudio.retention import RETENTION_K_MAX, RetentionMode

# The fields a user most often changes, as (form field, verl key, label, type).
IMPORTANT_FIELDS = [
    ("samples_per_prompt", "actor_rollout_ref.rollout.n", "Samples per prompt", int),
    ("train_batch_size", "data.train_batch_size", "Batch size (prompts per step)", int),
    ("learning_rate", "actor_rollout_ref.actor.optim.lr", "Learning rate", float),
    ("kl_loss_coef", "actor_rollout_ref.actor.kl_loss_coef", "KL loss coefficient", float),
    ("max_turns", "actor_rollout_ref.rollout.multi_turn.max_turns", "Max turns", int),
    ("total_training_steps", "trainer.total_training_steps", "Steps", int),
    ("save_freq", "trainer.save_freq", "Save a checkpoint every N steps (-1: at the end)", int),
]


def model_label(model) -> str:
    """A model as the form lists it: its name and what its registration check detected (the chat family,
    the tool-call parser and stop tokens its runs use)."""
    parts = [model.chat_family or "other chat format"]
    if model.tool_parser:
        parts.append(f"tool calls: {model.tool_parser}")
    if model.stop_tokens:
        parts.append("stops at " + " ".join(model.stop_tokens))
    return f"{model.name} ({'; '.join(parts)})"



def override_lines(text: str | None) -> list[str]:
    """The `key=value` lines of an overrides textarea, stripped, blank lines and `#` comments left out
    (the launch form's, the sweep form's and the run page's Fork form's)."""
    lines = (line.strip() for line in (text or "").splitlines())
    return [line for line in lines if line and not line.startswith("#")]

class ModelField(forms.ModelChoiceField):
    def label_from_instance(self, obj) -> str:
        return model_label(obj)


class RetentionFields(forms.Form):
    """A launch's sample retention (the run form's and the sweep form's fields): which samples keep their
    transcript in the database, checked by the launch as `PUT /api/v1/runs/{id}/retention/` checks it."""

    retention_mode = forms.ChoiceField(choices=RetentionMode.choices, required=False, initial=RetentionMode.ALL,
                                       label="Samples kept",
                                       help_text="Which samples keep their transcript in the database.")
    retention_k = forms.IntegerField(min_value=1, max_value=RETENTION_K_MAX, required=False, initial=1, label="k",
                                     help_text="Samples per step (first k), or every k-th step.")

    def retention(self) -> dict | None:
        """The retention chosen, {"mode", "k"}; None for "all samples" (no row: keep every one)."""
        mode = self.cleaned_data.get("retention_mode") or RetentionMode.ALL
        if mode == RetentionMode.ALL:
            return None
        return {"mode": mode, "k": self.cleaned_data.get("retention_k") or 1}


def retention_field(key: str) -> str:
    """The form field of a launch's refusal on `retention`, `retention.mode` or `retention.k`."""
    return "retention_k" if key == "retention.k" else "retention_mode"


class RunForm(RetentionFields):
    name = forms.CharField(max_length=200)
    dataset = forms.ModelChoiceField(queryset=None)
    val_dataset = forms.ModelChoiceField(queryset=None, required=False, label="Validation dataset")
    model = ModelField(queryset=None, help_text="Runs use the tool-call parser and stop tokens its check detected.")
    preset = forms.ChoiceField(choices=(), help_text="A trainer recipe to start from.")
    saved_config = forms.ModelChoiceField(queryset=None, required=False, label="Or a saved config",
                                          help_text="Starts from this config instead of the preset.")
    gpus = forms.IntegerField(min_value=0, max_value=1024, initial=0, label="GPUs")
    config_yaml = forms.CharField(widget=forms.Textarea, required=False, label="Whole config (YAML)",
                                  help_text="Optional: replaces the preset / saved config.")
    overrides = forms.CharField(widget=forms.Textarea(attrs={"rows": 4}), required=False,
                                help_text="One dotted key=value per line, verl's key names.")
    save_as = forms.CharField(max_length=200, required=False, label="Save this config as",
                              help_text="Optional: also save it as a named config.")
    tool_set = forms.ChoiceField(choices=(), required=False, label="Tool set",
                                 help_text="Tools an operator registered, offered in multi-turn rollout.")

    reward_name = forms.ChoiceField(
        choices=(), required=False, label="Reward function",
        help_text="reward.name: a built-in, or one an operator registered (empty = the preset's).")
    reward_model = forms.ModelChoiceField(
        queryset=None, required=False, label="Reward model", empty_label="none",
        help_text="A catalog reward model (sequence classification) scoring each trajectory; its weight "
                  "against the reward function: reward_model.rm_weight / rule_weight in the overrides.")

    project = forms.TypedChoiceField(choices=(), required=False, coerce=int, empty_value=None,
                                     help_text="One of your projects to put the run in (optional).")
    tags = forms.CharField(max_length=2000, required=False,
                           help_text="Optional: separated by commas or spaces (letters, digits, _ . : + / -).")
    def __init__(self, *args, datasets, models, configs, presets, tool_sets=(), rewards=(), reward_models=None,
                 projects=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["project"].choices = [("", "none")] + [(str(pk), name) for pk, name in projects]
        self.fields["tool_set"].choices = [("", "none")] + [(t, t) for t in tool_sets]
        self.fields["reward_name"].choices = [("", "the preset's")] + [(r, r) for r in rewards]
        self.fields["dataset"].queryset = datasets
        self.fields["val_dataset"].queryset = datasets
        self.fields["model"].queryset = models
        self.fields["reward_model"].queryset = reward_models if reward_models is not None else models.none()
        self.fields["saved_config"].queryset = configs
        self.fields["preset"].choices = [(p, p) for p in presets]
        for name, key, label, tp in IMPORTANT_FIELDS:
            field = forms.IntegerField if tp is int else forms.FloatField
            self.fields[name] = field(required=False, label=label, help_text=key)

    def override_list(self) -> list[str]:
        """The important fields that were filled in, then the free-text overrides (later wins)."""
        out = []
        if self.cleaned_data.get("reward_name"):
            out.append(f"reward.name={self.cleaned_data['reward_name']}")
        for name, key, _label, _tp in IMPORTANT_FIELDS:
            value = self.cleaned_data.get(name)
            if value is not None:
                out.append(f"{key}={value}")
        return out + override_lines(self.cleaned_data.get("overrides"))

    def tag_list(self) -> list[str]:
        """The tags typed, split on commas and spaces (the service checks each)."""
        return [t for t in (self.cleaned_data.get("tags") or "").replace(",", " ").split() if t]

    def config_inputs(self, *, config=None) -> dict | None:
        """The config's inputs from what cleaned (None without a valid preset and GPUs): the preset or a
        saved config, the whole config `config` (parsed YAML), the overrides, dataset, model, GPUs."""
        d = getattr(self, "cleaned_data", {})
        if "preset" not in d or "gpus" not in d or d.get("gpus") is None:
            return None
        saved = d["saved_config"].config if d.get("saved_config") else None
        return {"preset": d["preset"], "config": config, "base": None if config else saved,
                "overrides": self.override_list(), "dataset": d.get("dataset"), "val_dataset": d.get("val_dataset"),
                "model": d.get("model"), "gpus": d["gpus"], "reward_model": d.get("reward_model")}

    def field_for_error(self, field: str, *, source: str = "", typed: set[str] = frozenset()) -> str | None:
        """The form field an error belongs on: the field of its config key, else where the key was typed
        (the overrides, the YAML), else the form as a whole (None)."""
        mapped = self.field_for_key(field)
        if mapped:
            return mapped
        if source == "overrides" or field.startswith("overrides") or field in typed:
            return "overrides"
        if source == "config" or (self.data.get("config_yaml") or "").strip():
            return "config_yaml"
        return None

    def field_for_key(self, key: str) -> str | None:
        """The form field that shows errors for a config key."""
        for name, k, _label, _tp in IMPORTANT_FIELDS:
            if k == key:
                return name
        if key == "reward.name":
            return "reward_name"
        if key in ("reward_model_id", "reward_model.model.path"):
            return "reward_model"
        if key.startswith("retention"):
            return retention_field(key)
        if key in self.fields:
            return key
        return None
