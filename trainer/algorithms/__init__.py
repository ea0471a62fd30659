"""GRPO maths as pure torch functions: advantage estimators, policy losses, KL, metrics.

    advantages.py  registry of estimators: grpo (and Dr.GRPO), rloo, reinforce_plus_plus(_baseline)
    losses.py      agg_loss, PPO clipped policy loss (+ dual clip), KL estimators and controllers,
                   entropy, masked statistics
    metrics.py     verl's data metrics (critic/*, response_length/*, ...) and their reduction

Formulas and defaults follow verl (docs/design.md §4.5, §4.7).
"""
