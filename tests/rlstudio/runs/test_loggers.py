"""The platform's loggers come from the trainer's one list (trainer.config.LOGGERS): the sinks a user
may pick (gate.keys.USER_LOGGERS, a policy subset) and the sinks the platform adds at submit."""
from rlstudio.runs import launch
from rlstudio.runs.gate.keys import USER_LOGGERS
from trainer.config import LOGGERS


def test_user_loggers_are_a_subset_of_the_trainers_list():
    assert set(USER_LOGGERS) <= set(LOGGERS)
    assert "http" not in USER_LOGGERS  # the platform adds it, with the run's own token


def test_the_platform_adds_its_sinks_from_the_trainers_list():
    assert set(launch.WANTED_LOGGERS) <= set(LOGGERS)
    assert launch._allowed_loggers() == ("console", "jsonl", "http")


def test_a_sink_the_trainer_lacks_is_not_added(monkeypatch):
    monkeypatch.setattr(launch, "LOGGERS", ("console", "jsonl"))
    assert launch._allowed_loggers() == ("console", "jsonl")
