"""RankWorker: what one device runs, the same class in-process (world 1) and as a Ray actor.

One worker per device holds, colocated (verl's hybrid engine):
  actor      ActorWorker over the policy; FSDP2-sharded (`fully_shard` per decoder layer + root) when
             the world size is > 1, a plain module on one worker (the same maths: FSDP of one rank
             is the identity, so the one-worker path skips the process group); on GPUs its
             parameters and optimizer state in host memory between the phases that use them with
             actor.fsdp_config.param_offload / optimizer_offload (trainer.parallel.offload)
  ref        ActorWorker over the frozen reference (FSDP2 too; parameters on the CPU with
             ref.fsdp_config.param_offload on GPUs), only when a KL term needs it
  critic     CriticWorker over the value model (trainer.workers.critic; FSDP2-sharded as the
             actor), only for algorithm.adv_estimator=gae
  reward_model  RewardModelWorker (trainer.workers.reward_model), only with reward_model.enable: a
             full, unsharded copy of the sequence-classification model on every worker (inference
             only); each rank scores its contiguous share of the step's trajectories, as it generates
  engine     the rollout engine. `hf` on one worker runs on the actor's own module (nothing to
             sync); with FSDP it owns a full-weight copy, because generation cannot run on sharded
             parameters (every rank would have to join every all-gather of every decode step, and
             ranks stop decoding at different times)
  monitor    a MemoryMonitor whose events are buffered here, tagged with this rank, and drained by
             the driver after each call

Phase order per step (docs/design.md §4.6): generate (engine memory resumed, released after when
rollout.free_cache_engine) -> old_log_prob -> ref -> values -> update_critic -> update -> sync: the engine is resumed, the
parameters flow from the FSDP shards in buckets of rollout.update_weights_bucket_megabytes (gather a
bucket of full tensors, load it, free it), then flush_cache. Every phase boundary is a memory sample.

Fault injection for tests and drills: env TRAINER_FAULT_INJECT="<rank>:<phase>:<step>" makes that
rank exit the process (os._exit(3)) when it enters that phase at that step.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import torch


class BufferEmitter:
    """The emitter interface MemoryMonitor needs, buffering memory events (with the rank) in memory."""

    def __init__(self, rank: int):
        self.rank = rank
        self._items: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def memory(self, data: dict[str, Any]) -> None:
        with self._lock:
            self._items.append({**data, "rank": self.rank, "time": time.time()})

    def heartbeat(self, step: int) -> None:  # the driver sends heartbeats
        pass

    def drain(self) -> list[dict[str, Any]]:
        with self._lock:
            items, self._items = self._items, []
        return items


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


class RankWorker:
    """One device's models and engine. Construct cheaply, then `init(master_addr, master_port)`."""

    def __init__(self, cfg_dict: dict[str, Any], *, rank: int, world: int):
        from trainer.config import Config, resolve

        self.cfg = resolve(Config.from_dict(cfg_dict))
        self.rank, self.world = int(rank), int(world)
        threads = self.cfg.trainer.torch_threads or (1 if world > 1 else len(os.sched_getaffinity(0)))
        torch.set_num_threads(int(threads))
        self.step = 0
        self.fault = os.environ.get("TRAINER_FAULT_INJECT", "")

    # ------------------------------------------------------------------------------------- setup
    def master_address(self) -> tuple[str, int]:
        """Rank 0's address and a free port for torch.distributed's TCP rendezvous."""
        try:
            import ray

            addr = ray.util.get_node_ip_address()
        except Exception:  # not under Ray
            addr = "127.0.0.1"
        return addr, free_port()

    def node(self) -> dict[str, Any]:
        """Where this rank runs: Ray's node id and IP (None outside Ray), the host name and the pid."""
        node_id = node_ip = None
        try:
            import ray

            if ray.is_initialized():
                node_id, node_ip = ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()
        except Exception:  # not under Ray
            pass
        return {"rank": self.rank, "node_id": node_id, "node_ip": node_ip, "hostname": socket.gethostname(),
                "pid": os.getpid()}

    def init(self, master_addr: str | None = None, master_port: int | None = None) -> dict[str, Any]:
        from transformers import AutoModelForCausalLM

        from trainer.memory import MemoryMonitor
        from trainer.models.hf_folder import load_tokenizer
        from trainer.parallel.fsdp import shard_module
        from trainer.rollout.agent import MultiTurnRollout
        from trainer.rollout.base import build_engine, resolve_engine_name
        from trainer.tools import build_tools
        from trainer.workers.actor import ActorWorker
        from trainer.workers.lora import enabled as lora_enabled
        from trainer.workers.model_setup import resolve_device, resolve_dtype

        cfg = self.cfg
        arr, tr = cfg.actor_rollout_ref, cfg.trainer
        torch.manual_seed(tr.seed)
        device = resolve_device(tr.device)
        if device.type == "cuda":
            device = torch.device("cuda", torch.cuda.current_device())  # Ray: the actor's own GPU is cuda:0
            torch.cuda.set_device(device)
        self.device = device
        self.dtype = resolve_dtype(arr.model.dtype, device)
        import torch.distributed as dist

        if self.world > 1:
            backend = "nccl" if device.type == "cuda" else "gloo"
            dist.init_process_group(backend=backend, init_method=f"tcp://{master_addr}:{master_port}",
                                    rank=self.rank, world_size=self.world,
                                    timeout=datetime.timedelta(seconds=600))
        # Shard with FSDP2 whenever a process group exists: world > 1, or one process launched under
        # torchrun / bench/gpu_check.py (FSDP2 of one rank, to exercise the sharded path on one GPU).
        self.sharded = self.world > 1 or (dist.is_available() and dist.is_initialized())
        self.tokenizer = load_tokenizer(arr.model.tokenizer_path or arr.model.path, model_path=arr.model.path,
                                        trust_remote_code=arr.model.trust_remote_code)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        self.total_steps = int(cfg.actor_rollout_ref.actor.optim.total_training_steps or 0) or 1

        self.lora = None  # the actor's PeftModel when actor_rollout_ref.model.lora_rank > 0

        def load(dtype: torch.dtype, *, offload: bool = False, shard: bool = True, lora: bool = False
                 ) -> torch.nn.Module:
            m = AutoModelForCausalLM.from_pretrained(arr.model.path, dtype=dtype,
                                                     trust_remote_code=arr.model.trust_remote_code)
            if lora:  # adapters injected before sharding: FSDP2 shards them with their layer
                from trainer.workers.lora import wrap

                self.lora = wrap(m, arr.model)
            if not (offload and device.type == "cuda"):
                m = m.to(device)
            if self.sharded and shard:
                shard_module(m, device=device, compute_dtype=self.dtype, mixed_precision=True, offload=offload)
            return m

        common = dict(model_path=arr.model.path, device=device, dtype=self.dtype, temperature=arr.rollout.temperature,
                      trust_remote_code=arr.model.trust_remote_code, pad_token_id=pad)
        self.actor = ActorWorker(**common, actor_cfg=arr.actor, trainable=True, total_steps=self.total_steps,
                                 log_prob_micro_batch_size=arr.rollout.log_prob_micro_batch_size_per_gpu,
                                 gradient_checkpointing=arr.model.enable_gradient_checkpointing,
                                 use_torch_compile=arr.actor.use_torch_compile,
                                 model=load(torch.float32, lora=lora_enabled(arr.model)),
                                 rollout_correction=cfg.algorithm.rollout_correction)
        self.engine_name = resolve_engine_name(arr.rollout.name, device)
        # One hf worker: the engine runs on the actor's module itself. Otherwise (and with LoRA: it
        # generates with merged weights, trainer.workers.lora) it holds its own weights.
        self.shared_engine = self.engine_name == "hf" and not self.sharded and self.lora is None
        from trainer.parallel.offload import ActorOffload

        # verl's actor offload (offload.py), in host memory before the reference and the engine are built,
        # so that an engine sizing its pool at start (SGLang, vLLM) sees the room. Not the parameters of a
        # module the engine generates on (they would only travel to come back for every rollout).
        fsdp_cfg = arr.actor.fsdp_config
        self.offload = ActorOffload(self.actor.model, self.actor.optimizer, device,
                                    params=fsdp_cfg.param_offload and not self.shared_engine,
                                    optimizer_state=fsdp_cfg.optimizer_offload)
        self.offload.offload()
        # perf/mfu/actor (trainer.flops): verl's count for the actor's family and the device's peak;
        # either None (a family verl has no count for, the CPU, a GPU outside verl's table): not reported.
        from trainer import flops

        self.flops_shape = flops.shape_for(getattr(self.actor.model, "config", None))
        self.peak_flops = flops.device_peak_flops(device)
        self.critic = None  # the value model, only for algorithm.adv_estimator=gae
        from trainer.config.critic import uses_critic

        if uses_critic(cfg.algorithm.adv_estimator):
            from trainer.workers.critic import CriticWorker, load_value_model

            value_model = load_value_model(cfg.critic.model.path, dtype=torch.float32,
                                           trust_remote_code=arr.model.trust_remote_code).to(device)
            if self.sharded:  # sharded as the actor: each decoder layer, then the root
                shard_module(value_model, device=device, compute_dtype=self.dtype, mixed_precision=True)
            critic_steps = int(cfg.critic.optim.total_training_steps or 0)
            self.critic = CriticWorker(model=value_model, cfg=cfg.critic, device=device, dtype=self.dtype,
                                       total_steps=critic_steps if critic_steps > 0 else self.total_steps,
                                       pad_token_id=pad, loss_scale_factor=arr.actor.loss_scale_factor)
        self.ref = None  # with LoRA the reference is the actor with its adapter disabled (no copy)
        ref_offload = arr.ref.fsdp_config.param_offload
        if (arr.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward) and self.lora is None:
            self.ref = ActorWorker(**common, trainable=False, model=load(self.dtype, offload=ref_offload),
                                   log_prob_micro_batch_size=arr.ref.log_prob_micro_batch_size_per_gpu,
                                   use_torch_compile=bool(arr.ref.use_torch_compile))
        # The reference's param_offload: FSDP2's CPUOffloadPolicy when sharded; a plain module (one worker,
        # no process group) waits in host memory and comes to the device for its log-probs (offload.py).
        self.ref_offload = ActorOffload(self.ref.model if self.ref else None, None, device,
                                        params=bool(self.ref) and ref_offload and not self.sharded, optimizer_state=False)
        if self.engine_name == "hf":
            engine_model = self.actor.model if self.shared_engine else load(self.dtype, shard=False)
            engine_cfg = arr.rollout
        else:  # an engine with its own copy loads it as the actor's model says (dtype, remote code)
            engine_model = arr.model.path
            engine_cfg = {**dataclasses.asdict(arr.rollout), "dtype": arr.model.dtype,
                          "trust_remote_code": arr.model.trust_remote_code}
        self.engine = build_engine(self.engine_name, model=engine_model, tokenizer=self.tokenizer, config=engine_cfg,
                                   device=device)
        if self.engine_name == "hf" and not self.shared_engine:
            self.engine.share_module = False  # its own copy: release_memory may move it off the GPU
        self.reward_model = None  # reward_model.enable: a full replica per worker, inference only
        if cfg.reward_model.enable:
            from trainer.config.reward_model import micro_batch
            from trainer.workers.reward_model import RewardModelWorker

            rm = cfg.reward_model
            self.reward_model = RewardModelWorker(rm.model.path, device=device, dtype=self.dtype,
                                                  micro_batch=micro_batch(rm), max_length=rm.max_length,
                                                  trust_remote_code=rm.model.trust_remote_code)
        self.tools = build_tools(cfg.tools.names, cfg.tools.config_path)
        self.rollout = MultiTurnRollout(self.engine, self.tokenizer, self.tools, arr.rollout, cfg.data)
        self.emitter = BufferEmitter(self.rank)
        dev_name = "cpu" if device.type == "cpu" else f"cuda:{device.index or 0}"
        self.monitor = MemoryMonitor(self.emitter, device=dev_name, memory_interval_s=cfg.report.memory_interval_s,
                                     heartbeat_interval_s=0)
        self.monitor.start()
        with self.phase("sync", 0):
            sync = self.sync_weights(step=0, _phase=False)  # the engine starts from the actor's weights
        from trainer.memory import nvml_unavailable

        return {"rank": self.rank, "device": dev_name, "pid": os.getpid(), "engine": self.engine_name,
                "shared_engine": self.shared_engine, "initial_sync": sync,
                "nvml_unavailable": nvml_unavailable(dev_name)}

    # ------------------------------------------------------------------------------------ phases
    @contextlib.contextmanager
    def phase(self, name: str, step: int) -> Iterator[None]:
        self.step = self.monitor.step = int(step)
        if self.fault:
            r, ph, st = self.fault.split(":")
            if int(r) == self.rank and ph == name and int(st) == int(step):
                os._exit(3)  # fault injection: die like a crashed process would
        with self.monitor.phase(name):
            yield

    def generate(self, prompts: list[Any], *, n: int, sampling: Any, step: int) -> list[Any]:
        from trainer.tools import get_tool

        for p in prompts:  # tools named by a data row are offered to that row (as the driver templated it)
            for schema in p.tools or []:
                name = schema.get("function", {}).get("name")
                if name and name not in self.tools:
                    self.tools[name] = get_tool(name)
        with self.phase("rollout", step):
            self.engine.resume_memory()
            trajs = self.rollout.run(prompts, n=n, sampling=sampling) if prompts else []
            if self.cfg.actor_rollout_ref.rollout.free_cache_engine:
                self.engine.release_memory()
        return trajs

    def compute_log_prob(self, batch: Any, *, step: int, role: str = "actor", with_entropy: bool = True
                         ) -> tuple[torch.Tensor, torch.Tensor | None]:
        worker = self.actor if role == "actor" else self.ref
        base = role == "ref" and worker is None and self.lora is not None
        if base:  # LoRA: the reference is the base, i.e. the actor with its adapter switched off
            worker = self.actor
        if worker is None:
            raise RuntimeError(f"no {role} model on this worker")
        adapter_off = self.lora.disable_adapter() if base else contextlib.nullcontext()
        on_device = self.offload.resident() if worker is self.actor else self.ref_offload.resident()
        with self.phase("old_log_prob" if role == "actor" else "ref", step), on_device, adapter_off:
            return worker.compute_log_prob(batch, with_entropy=with_entropy)

    def update_policy(self, batch: Any, *, mini_batch_size: int, seed: int, capture: bool, step: int,
                      seqlens: list[int] | None = None) -> dict[str, Any]:
        """The actor's update on this rank's rows; `seqlens`: the whole step's sequence lengths (every
        rank's, prompt + response), which verl's perf/mfu/actor counts against this rank's update time."""
        with self.phase("update", step), self.offload.resident(optimizer=True):
            t0 = time.perf_counter()
            metrics = self.actor.update_policy(batch, mini_batch_size=mini_batch_size, seed=seed, capture=capture)
            seconds = time.perf_counter() - t0
        if seqlens and self.flops_shape is not None and self.peak_flops:  # averaged over ranks by the driver
            from trainer import flops

            epochs = int(self.cfg.actor_rollout_ref.actor.ppo_epochs)
            metrics["perf/mfu/actor"] = [flops.verl_mfu(self.flops_shape, seqlens, seconds, self.peak_flops,
                                                        ppo_epochs=epochs, world=self.world)]
        from trainer.memory import rss_bytes

        metrics["perf/cpu_memory_used_gb"] = [rss_bytes() / 2**30]  # averaged over ranks by the driver
        if self.device.type == "cuda":  # "max" in the name: the driver keeps the largest rank's value
            metrics["perf/max_memory_allocated_gb"] = [torch.cuda.max_memory_allocated(self.device) / 2**30]
            metrics["perf/max_memory_reserved_gb"] = [torch.cuda.max_memory_reserved(self.device) / 2**30]
            from trainer.memory import nvml_used_bytes

            used = nvml_used_bytes(f"cuda:{self.device.index or 0}")
            if used is not None:  # the whole device, engines' own pools included (NVML)
                metrics["perf/max_device_memory_used_gb"] = [used / 2**30]
        out: dict[str, Any] = {"metrics": metrics}
        if capture:
            out["old_log_probs"], out["entropy"] = batch.old_log_probs, self.actor.last_entropy
        return out

    def compute_values(self, batch: Any, *, step: int) -> torch.Tensor:
        """The critic's values (B, R) of this rank's share of the batch."""
        if self.critic is None:
            raise RuntimeError("no critic on this worker (algorithm.adv_estimator is not gae)")
        with self.phase("values", step):
            return self.critic.compute_values(batch)

    def update_critic(self, batch: Any, *, mini_batch_size: int, seed: int, step: int) -> dict[str, list[float]]:
        if self.critic is None:
            raise RuntimeError("no critic on this worker (algorithm.adv_estimator is not gae)")
        with self.phase("update_critic", step):
            return self.critic.update_critic(batch, mini_batch_size=mini_batch_size, seed=seed)

    def compute_rm_score(self, conversations: list[list[dict[str, Any]]], *, step: int) -> list[float]:
        """The reward model's score of each of this rank's conversations (trainer.workers.reward_model)."""
        if self.reward_model is None:
            raise RuntimeError("no reward model on this worker (reward_model.enable is off)")
        with self.phase("reward_model", step):
            return self.reward_model.score(conversations) if conversations else []

    def sync_weights(self, *, step: int, _phase: bool = True) -> dict[str, float]:
        """FSDP shards -> engine in buckets, then flush_cache. Returns bytes, seconds and buckets.
        With LoRA the engine gets merged weights under the base model's names (trainer.workers.lora)."""
        from trainer.parallel.fsdp import bucketed_full_tensors
        from trainer.workers.lora import merged_full_tensors

        ctx = self.phase("sync", step) if _phase else contextlib.nullcontext()
        if self.shared_engine:
            with ctx:
                return {"bytes": 0.0, "seconds": 0.0, "buckets": 0.0}  # the engine runs on these very tensors
        with ctx, self.offload.resident():
            t0 = time.perf_counter()
            self.engine.resume_memory()
            bucket_bytes = int(self.cfg.actor_rollout_ref.rollout.update_weights_bucket_megabytes) * 2**20
            nbytes = buckets = 0
            buckets_of = merged_full_tensors if self.lora is not None else bucketed_full_tensors
            for bucket in buckets_of(self.actor.model, bucket_bytes):
                self.engine.update_weights(bucket)
                nbytes += sum(t.numel() * t.element_size() for _, t in bucket)
                buckets += 1
                del bucket  # free the gathered full tensors before the next gather
            self.engine.flush_cache()
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            return {"bytes": float(nbytes), "seconds": time.perf_counter() - t0, "buckets": float(buckets)}

    # ---------------------------------------------------------------------------- checkpoints
    def save(self, path: str, critic_path: str | None = None) -> None:
        """This rank's shards of the actor (model + optimizer) under `path`, and of the critic under
        `critic_path` when there is one (DCP; every rank calls)."""
        Path(path).mkdir(parents=True, exist_ok=True)
        with self.offload.resident(optimizer=True):
            self.actor.save_sharded(path)
        if self.critic is not None and critic_path is not None:
            Path(critic_path).mkdir(parents=True, exist_ok=True)
            self.critic.save_sharded(critic_path)

    def load(self, path: str, critic_path: str | None = None, fork: bool = False) -> dict[str, float]:
        """This rank's shards of the actor (and the critic) from a checkpoint, then a weight sync. `fork`
        (trainer.resume_fork): then the config's lr, weight decay and LR schedule over the loaded
        optimizers (trainer.workers.optim.retune_optimizer)."""
        with self.offload.resident(optimizer=True):
            self.actor.load_sharded(path)
        if self.critic is not None:
            if critic_path is None or not Path(critic_path, ".metadata").exists():
                raise FileNotFoundError(f"the checkpoint has no critic ({critic_path}): it was saved by a run "
                                        "without algorithm.adv_estimator=gae")
            self.critic.load_sharded(critic_path)
        if fork:
            self.actor.retune_optimizer()  # lr and schedule only: wherever the state is
            if self.critic is not None:
                self.critic.retune_optimizer()
        return self.sync_weights(step=self.step)

    def export_hf(self, out_dir: str) -> None:
        """Consolidated Hugging Face export by rank 0 (the full-state gather is collective).

        With LoRA: `out_dir` gets the merged model (base + adapter, a plain HF folder) and
        `<parent>/lora_adapter/` the adapter (adapter_config.json + adapter_model.safetensors)."""
        from trainer import checkpoint as ckpt
        from trainer.parallel.fsdp import full_model_state

        adapter = None
        with self.offload.resident():
            if self.lora is not None:
                from trainer.workers import lora

                state = lora.merged_state(self.actor.model)
                adapter = lora.adapter_full_state(self.actor.model)
            else:
                state = full_model_state(self.actor.model)
        if self.rank != 0:
            return
        if adapter is not None:
            lora.save_adapter(self.lora, adapter, Path(out_dir).parent / lora.ADAPTER_DIR)
        elif not self.sharded:
            ckpt.export_hf(self.actor.model, self.tokenizer, Path(out_dir))
            return
        # save_pretrained on the FSDP module itself touches its (freed) unsharded storages (and the
        # LoRA module's names are not the model's): write from a plain CPU model of the same config
        # holding the gathered (merged) fp32 weights instead.
        from transformers import AutoModelForCausalLM

        plain = AutoModelForCausalLM.from_config(self.actor.model.config, dtype=torch.float32)
        # from_config derives a generation config from config.json alone: keep the checkpoint's own
        # (generation_config.json's eos list and sampling defaults) in the export.
        plain.generation_config = self.actor.model.generation_config
        missing, unexpected = plain.load_state_dict(state, strict=False)
        tied = bool(getattr(plain.config, "tie_word_embeddings", False))
        missing = [k for k in missing if not (tied and k.startswith("lm_head."))]  # the embedding's alias
        if missing or unexpected:
            raise RuntimeError(f"HF export: missing weights {missing}, unexpected {unexpected}")
        ckpt.export_hf(plain, self.tokenizer, Path(out_dir))
        del plain

    # ---------------------------------------------------------------------------- diagnostics
    def full_state(self, role: str = "actor") -> dict[str, torch.Tensor] | None:
        """The actor's (or the critic's) full weights on rank 0 (None on the others; collective under FSDP)."""
        from trainer.parallel.fsdp import full_model_state

        with self.offload.resident() if role != "critic" else contextlib.nullcontext():
            state = full_model_state((self.critic if role == "critic" else self.actor).model)
        return state if self.rank == 0 else None

    def drain_memory(self) -> list[dict[str, Any]]:
        return self.emitter.drain()

    def logits_gap(self, input_ids: list[list[int]]) -> float:
        """max |engine logits - actor logits| on the same input (both full forwards; collective under
        FSDP, so every rank calls). 0 means the engine holds exactly the actor's weights."""
        ids = torch.tensor(input_ids, dtype=torch.long, device=self.device)
        with torch.no_grad(), self.offload.resident():
            a = self.actor.model(input_ids=ids).logits.float()
            e = self.engine.model(input_ids=ids).logits.float() if hasattr(self.engine, "model") else None
        if e is None:
            raise RuntimeError(f"the {self.engine_name} engine exposes no module to compare")
        return float((a - e).abs().max())

    def ping(self) -> int:
        return os.getpid()

    def shutdown(self) -> None:
        self.monitor.stop()
        engine_shutdown = getattr(getattr(self, "engine", None), "shutdown", None)
        if engine_shutdown is not None:  # sglang: its scheduler and detokenizer processes and their GPU memory
            engine_shutdown()
        import torch.distributed as dist

        if self.world > 1 and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()  # ours; a group made by the caller (torchrun) stays theirs
