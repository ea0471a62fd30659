"""Operator registries: reward functions and tool sets that staff register and users choose by name.

    models.py      RewardFunction (a Python file under a reward root, or an importable module) and
                   ToolSet (a verl tool-config YAML of the trainer's registered tools)
    checks.py      the registration checks, each in a process of its own with a time limit
                   (`python -m trainer.rewards.check`, `python -m trainer.tools.check`)
    services.py    register / check / delete (staff, audited), and what the runs app calls:
                   `reward_function_resolve`, `tool_set_write`, `reward_function_names`, `tool_set_names`
    selectors.py   reads for the API, the admin and the dataset page's reward check
    api.py         /api/v1/reward-functions/ and /api/v1/tool-sets/ (list: any user; create, delete: staff)

A user never names a file or a class: the platform writes the resolved paths into a run's config.
This app imports nothing from `rlstudio.runs` (the runs app calls it).
"""
