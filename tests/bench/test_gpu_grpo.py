"""bench/gpu_grpo.py: its pure parts, and the --smoke run (the same code at tiny shapes on the CPU:
a one-rank gloo group, FSDP2 over it, the hf engine's own copy, GSM8K rows, fixed-length responses)."""
import json

import pytest

from bench import gpu_grpo, gpu_grpo_trl


def test_gsm8k_rows_are_verl_rows():
    line = json.dumps({"question": "Tom has 3 apples and buys 2. How many?", "answer": "3+2=<<3+2=5>>5\n#### 5"})
    [row] = gpu_grpo.gsm8k_rows([line, ""])
    assert row["data_source"] == "openai/gsm8k" and row["reward_model"]["ground_truth"] == "5"
    assert row["prompt"] == [{"role": "user", "content": "Tom has 3 apples and buys 2. How many? " + gpu_grpo.INSTRUCTION}]


def _args(**kw):
    import argparse

    base = dict(prompts=64, n=5, micro=16, response=1024, max_prompt=512, steps=4, trl_steps=3)
    return argparse.Namespace(**{**base, **kw})


def test_workload_is_verls_ratio_and_trl_gets_the_same_batches():
    w = gpu_grpo.workload(_args())
    assert (w["mini"], w["prompts"] // w["mini"]) == (16, 4)  # verl's 1024 / 256: four optimizer steps
    o = gpu_grpo_trl.trl_overrides(w, "cuda")
    assert o["per_device_train_batch_size"] * o["gradient_accumulation_steps"] == 16 * 5  # one mini-batch
    assert o["per_device_train_batch_size"] * o["steps_per_generation"] == 64 * 5  # one generate per step
    assert o["generation_kwargs"] == {"min_new_tokens": 1024} and o["bf16"] and not o["use_cpu"]
    with pytest.raises(SystemExit, match="must divide"):
        gpu_grpo.workload(_args(micro=7))


def test_trl_summary_drops_the_first_generation_batch():
    trl = {"group_s": [9.0, 2.0, 4.0], "generate_s": [5.0, 1.0, 1.0], "prompt_tokens": [100, 100, 100],
           "generated_tokens": [200, 200, 200]}
    s = gpu_grpo_trl.summarise_trl(trl, {"prompts": 4, "n": 2})
    assert (s["steps"], s["step_s"], s["samples_per_s"], s["throughput"], s["gen_share"]) == (2, 3.0, 8 / 3, 100.0, 1 / 3)


def test_smoke_run(tmp_path):
    out = tmp_path / "out"
    rc = gpu_grpo.main(["--smoke", "--inline", "--engine", "ours,decode", "--steps", "2", "--decode-batches", "3",
                        "--decode-new", "4", "--out", str(out), "--workdir", str(tmp_path / "work"),
                        "--write", str(tmp_path / "benchmarks.md")])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    steps = res["ours"]["steps"]
    assert len(steps) == 2 and all(s["response_length/mean"] == 8 for s in steps)  # ignore_eos: fixed length
    assert all(s["perf/throughput"] > 0 and s["verl_flops"] > 0 and 0 < s["gen_share"] < 1 for s in steps)
    assert res["ours"]["engine_stats"]["fast_decode"] == 1.0  # the engine's own (unsharded) copy
    assert res["ours_summary"]["steps"] == 1 and res["ours_summary"]["samples_per_s"] > 0
    check = res["decode"]["check"]  # on the CPU: the sliced step against the static one, same greedy tokens
    assert check["graphs_equal_eager"] is True and check["graphs_equal_eager_with_stops"] is True
    [row] = res["decode"]["rows"]
    assert row["batch"] == 3 and row["engine, sliced eager"] > 0 and row["generate"] > 0
    md = (tmp_path / "benchmarks.md").read_text()
    assert gpu_grpo.BEGIN in md and "RL Studio (FSDP2 one rank, hf engine)" in md
