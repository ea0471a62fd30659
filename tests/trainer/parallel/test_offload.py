"""The actor's offload between phases (trainer.parallel.offload, verl's actor.fsdp_config.param_offload
and optimizer_offload): which phase brings what to the device and sends it back (recorded moves, on
any machine), a no-op off a GPU, and on a GPU (marker `gpu`) the real round trip: host memory between
phases, the same training as without it."""
from __future__ import annotations

import pytest
import torch

from trainer.parallel import offload as off


def _recorded(monkeypatch):
    moves: list[tuple[str, str]] = []
    monkeypatch.setattr(off, "module_to", lambda model, device: moves.append(("params", device.type)))
    monkeypatch.setattr(off, "optimizer_state_to", lambda opt, device: moves.append(("optimizer", device.type)))
    return moves


def test_each_phase_brings_what_it_needs_and_sends_it_back(monkeypatch):
    moves = _recorded(monkeypatch)
    model = torch.nn.Linear(2, 2)
    o = off.ActorOffload(model, torch.optim.AdamW(model.parameters()), torch.device("cuda", 0),
                         params=True, optimizer_state=True)
    assert o.active
    with o.resident():  # a log-prob or a weight sync: the parameters only
        assert moves == [("params", "cuda")]
    assert moves[1:] == [("params", "cpu"), ("optimizer", "cpu")]
    moves.clear()
    with o.resident(optimizer=True):  # the update, with a checkpoint inside it: back to the host once
        with o.resident(optimizer=True):
            pass
        assert moves == [("params", "cuda"), ("optimizer", "cuda")] * 2  # loads only (a second is a no-op)
    assert moves[4:] == [("params", "cpu"), ("optimizer", "cpu")]


def test_only_what_is_offloaded_moves(monkeypatch):
    moves = _recorded(monkeypatch)
    model = torch.nn.Linear(2, 2)
    o = off.ActorOffload(model, torch.optim.AdamW(model.parameters()), torch.device("cuda", 0),
                         params=False, optimizer_state=True)
    with o.resident():
        pass
    with o.resident(optimizer=True):
        pass
    assert moves == [("optimizer", "cpu"), ("optimizer", "cuda"), ("optimizer", "cpu")]


def test_off_a_gpu_nothing_moves(monkeypatch):
    moves = _recorded(monkeypatch)
    model = torch.nn.Linear(2, 2)
    o = off.ActorOffload(model, torch.optim.AdamW(model.parameters()), torch.device("cpu"),
                         params=True, optimizer_state=True)
    with o.resident(optimizer=True):
        pass
    o.offload()
    assert not o.active and moves == []


def test_the_actor_goes_to_host_memory_before_the_engine_is_built(monkeypatch, tiny_model_dir, demo_data_dir):
    """SGLang and vLLM size their pools from the memory free when they start: the worker offloads the
    actor right after building it, before the reference and the engine; the parameters a one-worker hf
    engine generates on are never offloaded (the optimizer state still is). The reference's
    param_offload on one worker (no FSDP2 there) goes through the same mechanism."""
    from trainer.config import apply_overrides
    from trainer.parallel.worker import RankWorker
    from trainer.recipes import get_recipe
    from trainer.rollout import base

    order: list[str] = []
    asked: list[bool] = []  # the params= each ActorOffload was made with
    real_build, real_init = base.build_engine, off.ActorOffload.__init__

    def init(self, *args, **kwargs):
        asked.append(kwargs["params"])
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(off.ActorOffload, "__init__", init)
    monkeypatch.setattr(off.ActorOffload, "offload", lambda self: order.append("offload"))
    monkeypatch.setattr(base, "build_engine", lambda *a, **k: (order.append("engine"), real_build(*a, **k))[1])
    cfg = apply_overrides(get_recipe("cpu_smoke"), {
        "actor_rollout_ref.model.path": str(tiny_model_dir), "data.train_files": str(demo_data_dir / "train.jsonl"),
        "actor_rollout_ref.actor.fsdp_config.param_offload": True,
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload": True,
        "actor_rollout_ref.actor.use_kl_loss": True, "actor_rollout_ref.ref.fsdp_config.param_offload": True})
    worker = RankWorker(cfg.to_dict(), rank=0, world=1)
    try:
        worker.init()
        assert order[:2] == ["offload", "engine"]
        assert worker.shared_engine and asked[0] is False  # the actor's: param_offload asked for, not on the engine's module
        # the reference of one worker (no process group, so no FSDP2 CPUOffloadPolicy) is offloaded by hand
        assert asked[-1] is True and worker.ref_offload.model is worker.ref.model
    finally:
        worker.shutdown()


def test_a_cpu_run_with_the_actor_offloaded_trains(tmp_path, tiny_model_dir, demo_data_dir):
    """Every phase that wraps the actor in `resident` (rollout, log-probs, update, sync, checkpoint,
    export) runs with the keys set: on a CPU they move nothing and the run trains as without them."""
    import json

    from trainer.cli import main

    out = tmp_path / "out"
    rc = main(["run", "--recipe", "cpu_smoke", f"data.train_files={demo_data_dir / 'train.jsonl'}",
               f"actor_rollout_ref.model.path={tiny_model_dir}", "trainer.total_training_steps=2",
               "trainer.save_freq=2", "trainer.logger=[jsonl]",
               "actor_rollout_ref.actor.fsdp_config.param_offload=true",
               "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true", "--output", str(out)])
    assert rc == 0
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    trained = [e["data"]["step"] for e in events if e["type"] == "metrics" and "actor/pg_loss" in e["data"]["metrics"]]
    assert trained == [1, 2] and [e["data"]["state"] for e in events if e["type"] == "status"][-1] == "succeeded"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (host memory vs device memory)")
def test_on_a_gpu_the_actor_waits_in_host_memory_and_trains_the_same():
    torch.manual_seed(0)
    dev = torch.device("cuda", 0)
    twin = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.Linear(2048, 512)).to(dev)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.Linear(2048, 512)).to(dev)
    model.load_state_dict(twin.state_dict())
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (twin, model)]
    o = off.ActorOffload(model, opts[1], dev, params=True, optimizer_state=True)
    x = torch.randn(8, 512, device=dev)

    def train_step(m, opt):
        m(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        train_step(twin, opts[0])
        with o.resident(optimizer=True):
            train_step(model, opts[1])
            resident = torch.cuda.memory_allocated(dev)
        away = torch.cuda.memory_allocated(dev)
        assert all(p.device.type == "cpu" for p in model.parameters())
        assert all(v.device.type == "cpu" for s in opts[1].state.values() for v in s.values() if torch.is_tensor(v))
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        assert resident - away >= 3 * weights  # the weights and Adam's two moments left the device
    with o.resident():
        for a, b in zip(twin.parameters(), model.parameters()):
            torch.testing.assert_close(a, b)


def test_an_engine_with_its_own_copy_loads_it_as_the_models_dtype_and_remote_code(monkeypatch, tiny_model_dir,
                                                                                 demo_data_dir):
    """SGLang and vLLM are handed the actor's model.dtype and trust_remote_code with the rollout section
    (the rollout section has neither, so they always loaded bfloat16 without remote code)."""
    from trainer.config import apply_overrides
    from trainer.parallel.worker import RankWorker
    from trainer.recipes import get_recipe
    from trainer.rollout import base

    seen = {}

    class Built(Exception):
        pass

    def build(name, *, model, tokenizer, config, device):
        seen.update(name=name, model=model, config=config)
        raise Built

    monkeypatch.setattr(base, "resolve_engine_name", lambda name, device=None: "sglang")
    monkeypatch.setattr(base, "build_engine", build)
    cfg = apply_overrides(get_recipe("cpu_smoke"), {
        "actor_rollout_ref.model.path": str(tiny_model_dir), "data.train_files": str(demo_data_dir / "train.jsonl"),
        "actor_rollout_ref.model.dtype": "float16", "actor_rollout_ref.rollout.gpu_memory_utilization": 0.4})
    worker = RankWorker(cfg.to_dict(), rank=0, world=1)
    with pytest.raises(Built):
        worker.init()
    assert seen["name"] == "sglang" and seen["model"] == str(tiny_model_dir)
    assert seen["config"]["dtype"] == "float16" and seen["config"]["trust_remote_code"] is False
    assert seen["config"]["gpu_memory_utilization"] == 0.4  # the rollout section, as before


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_gpu_run_with_the_actor_and_the_reference_offloaded_trains(tmp_path, tiny_model_dir, demo_data_dir):
    """One GPU, one worker (no FSDP2): the actor's optimizer state and the reference's parameters wait
    in host memory; the run trains 2 steps with a KL loss and saves a checkpoint."""
    import json

    from trainer.cli import main

    out = tmp_path / "out"
    rc = main(["run", "--recipe", "cpu_smoke", f"data.train_files={demo_data_dir / 'train.jsonl'}",
               f"actor_rollout_ref.model.path={tiny_model_dir}", "trainer.device=cuda", "trainer.total_training_steps=2",
               "trainer.save_freq=2", "trainer.logger=[jsonl]", "actor_rollout_ref.rollout.name=hf",
               "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.ref.fsdp_config.param_offload=true",
               "actor_rollout_ref.actor.fsdp_config.param_offload=true",
               "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true", "--output", str(out)])
    assert rc == 0
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    steps = [e["data"]["metrics"] for e in events if e["type"] == "metrics" and "actor/kl_loss" in e["data"]["metrics"]]
    assert len(steps) == 2 and all(s["actor/kl_loss"] >= 0 for s in steps)
