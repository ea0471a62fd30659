"""One list of sink names: the schema's LOGGERS is what the sink registry registers and what
validate accepts in trainer.logger."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.config import LOGGERS, Config, ConfigError, apply_overrides, validate

ROOT = Path(__file__).resolve().parents[2]


def test_the_sink_registry_registers_exactly_the_schemas_loggers():
    # A fresh interpreter: other tests register extra sinks (test_sinks.py's memory sink).
    code = (
        "import json, trainer.sinks as s; from trainer.config import LOGGERS; "
        "print(json.dumps([s.available_sinks(), sorted(LOGGERS)]))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout
    registered, listed = json.loads(out)
    assert registered == listed


@pytest.mark.parametrize("name", LOGGERS)
def test_every_listed_logger_passes_validate(name):
    validate(apply_overrides(Config(), {"trainer.logger": [name]}), require_paths=False)


def test_a_logger_off_the_list_is_refused_naming_the_list():
    with pytest.raises(ConfigError) as exc:
        validate(apply_overrides(Config(), {"trainer.logger": ["console", "slack"]}),
                 require_paths=False)
    assert exc.value.key == "trainer.logger"
    assert exc.value.message.endswith("allowed values: " + ", ".join(LOGGERS))


def test_the_logger_help_names_every_sink():
    from trainer.config import describe_config

    help_ = {key: text for key, _tp, _default, text in describe_config()}["trainer.logger"]
    assert all(name in help_ for name in LOGGERS)
