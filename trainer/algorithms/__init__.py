"""GRPO maths as pure torch functions: advantage estimators, policy losses, KL, metrics.

    advantages.py     registry of estimators: grpo (and Dr.GRPO), rloo, opo, grpo_passk, gpg, remax,
                      reinforce_plus_plus(_baseline), gae
    losses.py         agg_loss, KL estimators and controllers, entropy, masked statistics
    policy_losses.py  registry of policy losses (actor.policy_loss.loss_mode): vanilla (PPO clip with
                      dual clip), gspo, cispo, gpg, geo_mean (GMPO), sapo, clip_cov, kl_cov
    metrics.py        verl's data metrics (critic/*, response_length/*, ...) and their reduction
    rollout_correction.py  importance weights, rejection masks and mismatch metrics between the
                      rollout engine's log-probs and the actor's (algorithm.rollout_correction)

Formulas and defaults follow verl (docs/design.md §4.5, §4.7).
"""
