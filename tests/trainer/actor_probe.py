"""Helpers shared by the actor tests (not a test module): an actor config, and one update's gradient."""
from __future__ import annotations

from trainer.config import Config, resolve


def actor_cfg(**kw):
    """actor_rollout_ref.actor with a 4-row mini-batch and lr 1e-3, plus `kw`."""
    cfg = resolve(Config.from_dict({"actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 4, "optim": {"lr": 1e-3},
                                                                    **kw}}}))
    return cfg.actor_rollout_ref.actor


def update_grads(worker, batch, **kw):
    """Gradients and metrics of one `update_policy` over the whole batch; weights, optimizer and
    scheduler are left as they were (the optimizer's step only records the gradients)."""
    worker.optimizer.zero_grad(set_to_none=True)
    state = {k: v.clone() for k, v in worker.model.state_dict().items()}
    opt_state, sched = worker.optimizer.state_dict(), worker.scheduler.state_dict()
    grads = {}
    step = worker.optimizer.step
    worker.optimizer.step = lambda *a, **k: grads.update(
        {n: p.grad.detach().clone() for n, p in worker.model.named_parameters()})
    try:
        metrics = worker.update_policy(batch, mini_batch_size=len(batch), **kw)
    finally:
        worker.optimizer.step = step
        worker.model.load_state_dict(state)
        worker.optimizer.load_state_dict(opt_state)
        worker.scheduler.load_state_dict(sched)
    return grads, metrics
