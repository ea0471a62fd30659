"""The demo's reward model: a tiny sequence-classification model trained here to predict the arithmetic
demo's rule reward from a whole transcript, so that GRPO can learn the demo with it as the only reward.

Run: ``python -m trainer make-demo-reward-model OUT [--init WARM_START] [--steps 600] [--pairs 12]
[--extra-layers 2] [--body-lr 3e-4] [--seed 0] [--threads 1]``

Data: transcripts of the arithmetic demo labelled by the rule, and matched pairs of them
(trainer.models.demo_rm_data, which says what each kind is and why it is there; it also measures a
reward model's agreement with the rule).

Initialisation: with ``--init`` a causal LM folder (the demo's warm start, trainer.models.demo), the
reward model is that model's body, `--extra-layers` fresh decoder layers on top (starting as the
identity) and a fresh one-label head, with its tokenizer and its chat template (the usual RLHF
recipe: the reward model starts from the supervised policy, which already reads this format and
copies operands and replies; the fresh layers give the comparison room above the policy's own
computation, which its last layer spends on predicting the next token); without it, a random tiny reward model
(trainer.models.tiny_rm, preset demo, its own tokenizer and template).

Training: binary cross-entropy on the head's output (a logit) at the last token of the reward model's
own rendering (trainer.workers.reward_model), plus ``pair_weight`` times a Bradley-Terry term on the
matched pairs (-log sigmoid(score of the right one - score of the wrong one)), plus
``prefix_weight`` times a per-token term on the pairs (`prefix_targets`: the head's output at every
token from the first one where the two differ, labelled with its transcript's label, so the model
is told where the difference is; and at that first token, a Bradley-Terry term on the two tokens'
outputs, `first_differences`: it brought a changed answer digit from 0.66 to 0.79 of pairs ranked
right). Every batch of `--batch` conversations holds `--pairs` matched
pairs, the rest drawn from the mix. The head and the fresh layers train at `--lr`, the policy's
body at `--body-lr`; AdamW with warmup and cosine decay; bounded by steps, so the same seed gives
the same model on the same machine. The result (``demo_rm_train.json``) has the agreement with the
rule on the mix (training and held-out problems), per kind on held-out problems, and the share of
held-out matched pairs ranked right (`agreement_by_kind`). The folder is a plain Hugging Face
sequence-classification checkpoint (config, weights, tokenizer, chat template) that the catalog
registers as a reward model.

What it learns (docs/benchmarks.md, bench:reward_model): answers of another length or sign, off by
1 or 10, an operand or another operator's result, a miscopied operator, a malformed call (all or
nearly all pairs ranked right); one answer digit changed or two swapped about 0.9 of pairs; an
operand digit miscopied in the call barely (0.54 / 0.70), and that is where GRPO on it drifts.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path
from typing import Any

from trainer.models.demo_rm_data import accuracy, agreement_by_kind, labelled_conversations, matched_pairs

# Training defaults (docs/benchmarks.md, bench:reward_model): matched pairs per batch of 32, fresh
# layers on the policy's body, the body's learning rate (the fresh layers and the head: --lr).
PAIRS = 12
EXTRA_LAYERS = 2
BODY_LR = 3e-4


def init_from_policy(out_dir: str | Path, init: str | Path, *, extra_layers: int = 0) -> Path:
    """A one-label sequence-classification model from the causal LM folder `init`: its body, with
    `extra_layers` fresh decoder layers on top (before the final norm), a fresh head, its tokenizer and
    chat template, written to `out_dir`. A fresh
    layer's output projections (attention and MLP) start at zero, so it starts as the identity and the
    model reads the policy's last hidden states."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from trainer.models.hf_folder import load_tokenizer

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(init)
    tok.save_pretrained(out)
    cfg = AutoConfig.from_pretrained(str(init))
    body = int(cfg.num_hidden_layers)
    cfg.num_hidden_layers = body + extra_layers
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = list(cfg.layer_types) + [cfg.layer_types[-1]] * extra_layers
    cfg.num_labels, cfg.pad_token_id = 1, tok.pad_token_id
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForSequenceClassification.from_pretrained(str(init), config=cfg, dtype=torch.float32)
    with torch.no_grad():
        for layer in model.base_model.layers[body:]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    model.config.architectures = [type(model).__name__]
    model.save_pretrained(out, safe_serialization=True)
    return out


def token_scores(model: Any, ids: Any, mask: Any) -> Any:
    """(b, T) head outputs at every token of a right-padded batch: the sequence-classification model's
    own computation (its `score` head on the last hidden states) before it picks the last token,
    which is where trainer.workers.reward_model reads the score."""
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    hidden = model.base_model(input_ids=ids, attention_mask=mask, position_ids=positions,
                              use_cache=False).last_hidden_state
    return model.score(hidden)[..., 0].float()


def prefix_targets(seqs: list[list[int]], labels: Any, single: int, width: int) -> tuple[Any, Any]:
    """Targets and weights (b, width) of the prefix term on the matched pairs (rows single + 2i, the
    right transcript, and single + 2i + 1, the wrong one; only pairs whose labels differ): every
    token from the first one where the two differ to the end is labelled with its transcript's
    label. Earlier tokens are the same in both (the same score), so they get no target."""
    import torch

    target = torch.zeros((len(seqs), width))
    weight = torch.zeros((len(seqs), width))
    for r in range(single, len(seqs) - 1, 2):
        if not labels[r] > 0.5 > labels[r + 1]:
            continue
        a, b = seqs[r], seqs[r + 1]
        first = next((i for i, (x, z) in enumerate(zip(a, b)) if x != z), min(len(a), len(b)))
        for row, seq in ((r, a), (r + 1, b)):
            target[row, first:len(seq)] = float(labels[row])
            weight[row, first:len(seq)] = 1.0
    return target, weight


def first_differences(seqs: list[list[int]], labels: Any, single: int) -> list[tuple[int, int]]:
    """(row of the right transcript, first position where the pair differs) of each matched pair with
    different labels (rows as in `prefix_targets`) where both transcripts have a token there."""
    out = []
    for r in range(single, len(seqs) - 1, 2):
        a, b = seqs[r], seqs[r + 1]
        first = next((i for i, (x, z) in enumerate(zip(a, b)) if x != z), None)
        if labels[r] > 0.5 > labels[r + 1] and first is not None:
            out.append((r, first))
    return out


def make_demo_reward_model(out_dir: str | Path, *, init: str | Path | None = None, steps: int = 600,
                           batch: int = 32, pairs: int = PAIRS, pair_weight: float = 1.0,
                           prefix_weight: float = 1.0, lr: float = 1e-3,
                           extra_layers: int | None = None, body_lr: float | None = None, seed: int = 0,
                           eval_every: int = 0, log: Any = print) -> dict[str, Any]:
    """Build the reward model (from the policy folder `init`, else a random tiny one), train it on
    `labelled_conversations` and `matched_pairs` (`pairs` of them in every batch of `batch`), save
    it to `out_dir`; returns {steps, seconds, loss, train_accuracy, held_out_accuracy, held_out_by_kind,
    ...}. With `init`, `extra_layers` fresh layers go on the policy's body (`init_from_policy`; None:
    EXTRA_LAYERS); the body (the policy's layers and embeddings) trains at `body_lr` (None: BODY_LR;
    0: frozen), the fresh layers and the head at `lr`. With `eval_every`, `agreement_by_kind` on 64 held-out transcripts per
    kind is logged every so many steps (and kept under "evals")."""
    import torch
    import torch.nn.functional as F

    from trainer.models.tiny_rm import make_tiny_reward_model
    from trainer.workers.reward_model import RewardModelWorker

    if not 0 <= 2 * pairs <= batch:
        raise ValueError(f"pairs must be in 0..batch/2 ({batch // 2}), got {pairs}")
    out = Path(out_dir)
    if init is not None:
        extra_layers = EXTRA_LAYERS if extra_layers is None else extra_layers
        body_lr = BODY_LR if body_lr is None else body_lr
        body = int(json.loads((Path(init) / "config.json").read_text())["num_hidden_layers"])
        init_from_policy(out, init, extra_layers=extra_layers)
    elif extra_layers or body_lr is not None:  # nothing to put them on
        raise ValueError("extra_layers and body_lr need init (a policy folder)")
    else:
        make_tiny_reward_model(out, preset="demo", seed=seed)
        body, extra_layers = 0, 0
    w = RewardModelWorker(str(out), device=torch.device("cpu"), micro_batch=batch)
    model = w.model
    fresh = [f"layers.{i}." for i in range(body, body + extra_layers)]
    groups: dict[str, list[Any]] = {"body": [], "fresh": []}
    for name, p in model.named_parameters():
        in_body = init is not None and not name.startswith("score.") and not any(f in name for f in fresh)
        groups["body" if in_body else "fresh"].append(p)
    body_lr = lr if body_lr is None else body_lr
    trainable = groups["fresh"] + (groups["body"] if body_lr > 0 else [])
    single = batch - 2 * pairs
    data = labelled_conversations(steps * single // 2 + 1000, seed=seed)
    enc = [(w.encode(m), y) for m, y in data]
    enc_pairs = [((w.encode(p), yp), (w.encode(q), yq))
                 for (p, yp), (q, yq) in matched_pairs(steps * pairs // 2 + 500, seed=seed + 2)]
    held = labelled_conversations(512, split="test", seed=seed + 1)
    opt = torch.optim.AdamW([{"params": groups["fresh"], "lr": lr}]
                            + ([{"params": groups["body"], "lr": body_lr}] if body_lr > 0 and groups["body"] else []),
                            weight_decay=0.01)
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, steps - warm))))
    rng = random.Random(seed)
    torch.manual_seed(seed)
    evals: list[dict[str, Any]] = []

    def evaluate(step: int) -> None:
        model.eval()
        for p in model.parameters():
            p.requires_grad_(False)
        got = agreement_by_kind(w, n=64)
        evals.append({"step": step, **got})
        log(f"step {step} held-out agreement " + " ".join(f"{k} {v:.3f}" for k, v in got.items()))

    t0, ema = time.perf_counter(), {}
    for step in range(steps):
        model.train()
        for p in trainable:
            p.requires_grad_(True)
        rows = rng.sample(enc, single)
        for right, wrong in rng.sample(enc_pairs, pairs):
            rows += [right, wrong]  # rows single + 2i (right) and single + 2i + 1 (wrong)
        width = max(len(ids) for ids, _ in rows)
        ids = torch.full((batch, width), w.pad_id, dtype=torch.long)
        mask = torch.zeros((batch, width), dtype=torch.long)
        for r, (seq, _) in enumerate(rows):
            ids[r, : len(seq)] = torch.as_tensor(seq)
            mask[r, : len(seq)] = 1
        y = torch.tensor([lab for _, lab in rows], dtype=torch.float32)
        dense_y, dense_w = prefix_targets([seq for seq, _ in rows], y, single, width)
        with torch.enable_grad():
            per_token = token_scores(model, ids, mask)
            logits = per_token[torch.arange(batch), mask.sum(-1) - 1]
            bce = F.binary_cross_entropy_with_logits(logits, y)
            right, wrong = logits[single::2], logits[single + 1::2]
            differ = (y[single::2] - y[single + 1::2]) > 0.5  # the right one is right, the wrong one wrong
            bt = -F.logsigmoid(right - wrong)[differ].mean() if bool(differ.any()) else logits.sum() * 0.0
            prefix = (F.binary_cross_entropy_with_logits(per_token, dense_y, weight=dense_w, reduction="sum")
                      / dense_w.sum().clamp(min=1.0))
            # where a pair first differs, both tokens exist: the right one's token scores above the wrong one's
            at = first_differences([seq for seq, _ in rows], y, single)
            local = (-F.logsigmoid(per_token[[r for r, _ in at], [f for _, f in at]]
                                   - per_token[[r + 1 for r, _ in at], [f for _, f in at]]).mean()
                     if at else logits.sum() * 0.0)
            loss = bce + pair_weight * bt + prefix_weight * (prefix + local)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            opt.step()
            sched.step()
        for key, value in (("loss", loss), ("bce", bce), ("pair_loss", bt), ("prefix_loss", prefix)):
            v = float(value.detach())
            ema[key] = v if key not in ema else 0.95 * ema[key] + 0.05 * v
        if (step + 1) % 25 == 0 or step + 1 == steps:
            log(f"step {step + 1}/{steps} loss {ema['loss']:.4f} bce {ema['bce']:.4f} pair {ema['pair_loss']:.4f} "
                f"prefix {ema['prefix_loss']:.4f} ({time.perf_counter() - t0:.0f} s)")
        if eval_every and (step + 1) % eval_every == 0 and step + 1 < steps:
            evaluate(step + 1)
    seconds = time.perf_counter() - t0
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    by_kind = agreement_by_kind(w, n=256)
    result = {"steps": steps, "batch": batch, "pairs": pairs, "pair_weight": pair_weight, "lr": lr,
              "extra_layers": extra_layers, "body_lr": body_lr,
              "seconds": seconds, "loss": ema["loss"], "bce": ema["bce"], "pair_loss": ema["pair_loss"],
              "prefix_weight": prefix_weight, "prefix_loss": ema["prefix_loss"],
              "train_accuracy": accuracy(w, data[:512]), "held_out_accuracy": accuracy(w, held),
              "held_out_by_kind": by_kind, "evals": evals}
    log("held-out agreement " + " ".join(f"{k} {v:.3f}" for k, v in by_kind.items()))
    model.save_pretrained(out, safe_serialization=True)
    (out / "demo_rm_train.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trainer make-demo-reward-model",
                                 description="Train the demo's tiny reward model on rule-labelled transcripts.")
    ap.add_argument("out", help="output folder (HF format)")
    ap.add_argument("--init", default=None, help="a causal LM folder to start from (the demo's warm start)")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--pairs", type=int, default=PAIRS, help="matched pairs in each batch (2 conversations each)")
    ap.add_argument("--pair-weight", type=float, default=1.0, help="weight of the pairwise (Bradley-Terry) term")
    ap.add_argument("--prefix-weight", type=float, default=1.0,
                    help="weight of the prefix term (every token of a pair from where the two differ)")
    ap.add_argument("--eval-every", type=int, default=0, help="log the held-out agreement every N steps (0: at the end)")
    ap.add_argument("--lr", type=float, default=1e-3, help="learning rate of the head and the fresh layers")
    ap.add_argument("--extra-layers", type=int, default=None,
                    help=f"fresh decoder layers on the policy's body (with --init; default {EXTRA_LAYERS})")
    ap.add_argument("--body-lr", type=float, default=None,
                    help=f"learning rate of the policy's body (with --init; default {BODY_LR:g}; 0: frozen)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    res = make_demo_reward_model(args.out, init=args.init, steps=args.steps, batch=args.batch, pairs=args.pairs,
                                 pair_weight=args.pair_weight, prefix_weight=args.prefix_weight, lr=args.lr,
                                 extra_layers=args.extra_layers,
                                 body_lr=args.body_lr, seed=args.seed, eval_every=args.eval_every)
    print(json.dumps(res, indent=2))
    return 0
