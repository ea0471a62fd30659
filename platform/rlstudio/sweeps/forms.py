"""The sweep form: the run form's starting choices (dataset, model, preset or saved config, GPUs,
overrides), the mode (grid, or random search with its run count and optional seed) and up to
MAX_AXES axis rows, each a config key a user may set and its values separated by commas (read as
YAML scalars by `grid.parse_values_text`) or, for random search, a range `MIN..MAX [log] [int]`
(`sample.parse_range_text`). The form only collects; the service (`services.sweep_launch`) checks
everything, and a refusal on `axes[i]...` is put on row i + 1."""
from __future__ import annotations

from django import forms

from rlstudio.runs.forms import ModelField, RetentionFields, override_lines, retention_field
from rlstudio.runs.gate.keys import USER_KEYS

from .grid import MAX_AXES, AxesInvalid, parse_values_text
from .models import MAX_SWEEP_NAME_LENGTH, SweepMode
from .sample import MAX_SEED, is_range_text, parse_range_text


class SweepForm(RetentionFields):
    name = forms.CharField(max_length=MAX_SWEEP_NAME_LENGTH, help_text="Each run is named <name>/<key=value,...>.")
    dataset = forms.ModelChoiceField(queryset=None)
    val_dataset = forms.ModelChoiceField(queryset=None, required=False, label="Validation dataset")
    model = ModelField(queryset=None)
    preset = forms.ChoiceField(choices=(), help_text="A trainer recipe to start from.")
    saved_config = forms.ModelChoiceField(queryset=None, required=False, label="Or a saved config",
                                          help_text="Starts from this config instead of the preset.")
    gpus = forms.IntegerField(min_value=0, max_value=1024, initial=0, label="GPUs of each run")
    overrides = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False,
                                help_text="One dotted key=value per line, for every run (verl's key names).")
    mode = forms.ChoiceField(choices=SweepMode.choices, initial=SweepMode.GRID, widget=forms.RadioSelect, required=False,
                             help_text="Grid: one run per combination of the values. Random search: the number "
                                       "of runs below, each drawn from the axes (a list or a range).")
    runs = forms.IntegerField(required=False, min_value=1, label="Runs (random search)",
                              help_text="How many runs to draw.")
    seed = forms.IntegerField(required=False, min_value=0, max_value=MAX_SEED, label="Seed (random search)",
                              help_text="Optional: the same seed and axes draw the same runs; empty: one is "
                                        "picked and shown on the sweep's page.")

    def __init__(self, *args, datasets, models, configs, presets, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["dataset"].queryset = datasets
        self.fields["val_dataset"].queryset = datasets
        self.fields["model"].queryset = models
        self.fields["saved_config"].queryset = configs
        self.fields["preset"].choices = [(p, p) for p in presets]
        keys = [("", "—")] + [(k, k) for k in USER_KEYS]
        for i in range(1, MAX_AXES + 1):
            self.fields[f"axis_key_{i}"] = forms.ChoiceField(choices=keys, required=i == 1, label=f"Axis {i}: key")
            self.fields[f"axis_values_{i}"] = forms.CharField(
                required=False, max_length=2000, label=f"Axis {i}: values",
                help_text=("Comma-separated, e.g. 1e-6, 3e-6; random search also takes a range "
                           "MIN..MAX [log] [int], e.g. 1e-7..1e-5 log" if i == 1 else ""))

    def axis_rows(self) -> list[int]:
        return list(range(1, MAX_AXES + 1))

    def clean(self):
        cleaned = super().clean()
        axes = []
        for i in range(1, MAX_AXES + 1):
            key, text = cleaned.get(f"axis_key_{i}"), (cleaned.get(f"axis_values_{i}") or "").strip()
            if not key and not text:
                continue
            if not key:
                self.add_error(f"axis_key_{i}", "choose the key these values are for")
                continue
            try:
                if is_range_text(text):
                    axes.append({"key": key, **parse_range_text(text, field=f"axis_values_{i}")})
                else:
                    axes.append({"key": key, "values": parse_values_text(text, field=f"axis_values_{i}")})
            except AxesInvalid as exc:
                self.add_error(f"axis_values_{i}", f"axis {i}: {exc}")
        cleaned["axes"] = axes
        cleaned["mode"] = cleaned.get("mode") or SweepMode.GRID  # not sent: a grid, as before the choice
        if cleaned["mode"] == SweepMode.GRID:  # the random-search boxes, left filled after switching back
            cleaned["runs"] = cleaned["seed"] = None
        return cleaned

    def override_list(self) -> list[str]:
        return override_lines(self.cleaned_data.get("overrides"))

    def error_text(self, field: str, message: str) -> str:
        """A service refusal as the form says it: naming the axis row (`axis 2 (axes[1].min): ...`) or
        the field."""
        if field.startswith("axes["):
            try:
                return f"axis {int(field[5:field.index(']')]) + 1} ({field}): {message}"
            except ValueError:
                pass
        return f"{field}: {message}"

    def field_for_error(self, field: str) -> str | None:
        """The form field an error of the service belongs on (`axes[1]...` -> the 2nd axis row)."""
        if field.startswith("axes["):
            try:
                row = int(field[5:field.index(']')]) + 1
            except ValueError:
                return None
            return f"axis_key_{row}" if field.endswith(".key") else f"axis_values_{row}"
        if field.startswith("retention"):
            return retention_field(field)
        return field if field in self.fields else ("overrides" if "." in field else None)
