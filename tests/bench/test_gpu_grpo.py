"""bench/gpu_grpo.py: its pure parts, and the --smoke run (the same code at tiny shapes on the CPU:
a one-rank gloo group, FSDP2 over it, the hf engine's own copy, GSM8K rows, fixed-length responses)."""
import json
import time

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
    # each part wrote what it had done as it went (kept when a part is stopped at the budget)
    work = tmp_path / "work"
    assert len(json.loads((work / "ours" / "partial.json").read_text())["steps"]) == 2
    assert [r["batch"] for r in json.loads((work / "decode" / "partial.json").read_text())["rows"]] == [3]
    # back from the device: the returned results.json into the docs, no --out needed
    (tmp_path / "benchmarks.md").write_text(f"intro\n\n{gpu_grpo.BEGIN}\npending\n{gpu_grpo.END}\n")
    assert gpu_grpo.main(["--from-json", str(out / "results.json"), "--write", str(tmp_path / "benchmarks.md")]) == 0
    md = (tmp_path / "benchmarks.md").read_text()
    assert md.startswith("intro") and "pending" not in md and "RL Studio (FSDP2 one rank, hf engine)" in md


def test_parts_run_in_the_budget_order_ours_trl_decode(tmp_path, monkeypatch):
    """TRL's ratio is the headline: by default it runs second, before the decode table."""
    order = []
    monkeypatch.setattr(gpu_grpo, "prepare", lambda work, smoke: (work / "model", work / "data"))
    monkeypatch.setattr(gpu_grpo, "environment", lambda device: {})
    monkeypatch.setattr(gpu_grpo, "_subprocess_part", lambda part, *a, **_: order.append(part) or {})
    gpu_grpo.main(["--out", str(tmp_path / "out"), "--workdir", str(tmp_path)])
    assert order == ["ours", "trl", "decode"]


def test_the_budget_is_shared_so_the_first_part_cannot_spend_the_next_ones_time(tmp_path, monkeypatch):
    """ours gets 0.45 / (0.45 + 0.40 + 0.15) of what is left, TRL then 0.40 / 0.55 of what is left
    after ours (ours finishing early passes its time on), decode all the rest."""
    assert gpu_grpo.part_deadline(["ours", "trl", "decode"], 1000.0, now=0.0) == pytest.approx(450.0)
    assert gpu_grpo.part_deadline(["trl", "decode"], 1000.0, now=100.0) == pytest.approx(100 + 900 * 0.40 / 0.55)
    assert gpu_grpo.part_deadline(["decode"], 1000.0, now=900.0) == pytest.approx(1000.0)
    assert gpu_grpo.part_deadline(["trl"], 1000.0, now=1200.0) == pytest.approx(1200.0)
    given = {}
    monkeypatch.setattr(gpu_grpo, "prepare", lambda work, smoke: (work / "model", work / "data"))
    monkeypatch.setattr(gpu_grpo, "environment", lambda device: {})
    monkeypatch.setattr(gpu_grpo, "_subprocess_part",
                        lambda part, args, work, deadline, **_: given.setdefault(part, deadline - time.monotonic()) and {})
    gpu_grpo.main(["--out", str(tmp_path / "out"), "--workdir", str(tmp_path), "--budget-s", "1000"])
    assert 440 < given["ours"] <= 450
    # the stand-in ours took no time, so TRL's share is of (nearly) the whole budget, and decode gets the rest
    assert 1000 * 0.40 / 0.55 - 10 < given["trl"] <= 1000 * 0.40 / 0.55
    assert 990 < given["decode"] <= 1000


def _fake_child(monkeypatch, code, tail, partial=None):
    """_subprocess_part's child replaced: it leaves `partial` (a part's partial.json) and exits `code`."""
    def run(cmd, env, timeout, tick=None):
        work = gpu_grpo.Path(cmd[cmd.index("--workdir") + 1])
        part = cmd[cmd.index("--part") + 1]
        if partial is not None:
            (work / part).mkdir(parents=True, exist_ok=True)
            (work / part / "partial.json").write_text(json.dumps(partial))
        return code, tail

    monkeypatch.setattr(gpu_grpo, "_run_teed", run)


def _parent_args(tmp_path):
    import argparse

    return argparse.Namespace(steps=4, trl_steps=3, prompts=64, n=5, response=1024, max_prompt=512, micro=16,
                              peak_tflops=None, decode_batches="64", decode_new=8, smoke=False, out=tmp_path)


@pytest.mark.parametrize("part,partial", [("ours", {"steps": [{"timing_s/step": 1.0}], "setup_s": 1.0}),
                                          ("decode", {"rows": [{"batch": 64}], "new_tokens": 8}),
                                          ("trl", {"group_s": [3.0, 2.0], "generate_s": [1.0, 1.0]})])
def test_a_part_stopped_at_the_budget_keeps_what_it_finished(tmp_path, monkeypatch, part, partial):
    _fake_child(monkeypatch, "timeout", ["Killed"], partial)
    res = gpu_grpo._subprocess_part(part, _parent_args(tmp_path), tmp_path, gpu_grpo.time.monotonic() + 100)
    assert res == {**partial, "stopped": "timeout"}


def test_a_stale_partial_is_not_kept_and_a_failure_shows_its_last_lines(tmp_path, monkeypatch):
    (tmp_path / "decode").mkdir()
    (tmp_path / "decode" / "partial.json").write_text(json.dumps({"rows": [{"batch": 64}]}))  # an earlier run's
    tail = ["Traceback (most recent call last):", '  File "x.py", line 1', "torch.OutOfMemoryError: CUDA out of memory"]
    _fake_child(monkeypatch, 1, tail)
    with pytest.raises(RuntimeError, match="decode exited 1") as err:
        gpu_grpo._subprocess_part("decode", _parent_args(tmp_path), tmp_path, gpu_grpo.time.monotonic() + 100)
    assert "CUDA out of memory" in str(err.value)
    result = {"workload": gpu_grpo.workload(_parent_args(tmp_path)), "env": {}, "command": "x",
              "decode_error": f"Traceback:\n  ...\nRuntimeError: {err.value}"}
    md = gpu_grpo.render(result)
    assert "decode: failed" in md and "torch.OutOfMemoryError: CUDA out of memory" in md and 'File "x.py"' in md


def test_a_running_part_s_figures_reach_out_before_it_ends(tmp_path, monkeypatch):
    """A device call cut off from outside kills the parent too: what the running part has finished is
    copied into results.json / results.md as it goes (marked still running), not only at its end."""
    out = tmp_path / "out"
    seen = {}
    partial = {"new_tokens": 8, "dtype": "torch.bfloat16", "check": {},
               "rows": [{"batch": 64, "engine, CUDA graphs": 5000.0, "generate": 1000.0}]}

    def child(cmd, env, timeout, tick=None):
        work = gpu_grpo.Path(cmd[cmd.index("--workdir") + 1])
        (work / "decode").mkdir(parents=True, exist_ok=True)
        (work / "decode" / "partial.json").write_text("{\"rows\": [")  # caught mid-write: not copied
        tick()
        seen["mid_write"] = json.loads((out / "results.json").read_text())  # written before any part
        (work / "decode" / "partial.json").write_text(json.dumps(partial))
        tick()
        seen["json"] = json.loads((out / "results.json").read_text())
        seen["md"] = (out / "results.md").read_text()
        return -9, ["Killed"]

    monkeypatch.setattr(gpu_grpo, "prepare", lambda work, smoke: (work / "model", work / "data"))
    monkeypatch.setattr(gpu_grpo, "environment", lambda device: {"device": "NVIDIA H200"})
    monkeypatch.setattr(gpu_grpo, "_run_teed", child)
    assert gpu_grpo.main(["--out", str(out), "--workdir", str(tmp_path / "work"), "--engine", "decode"]) == 0
    assert seen["mid_write"]["env"] == {"device": "NVIDIA H200"} and "decode" not in seen["mid_write"]
    assert seen["json"]["decode"] == {**partial, "stopped": "running"}
    assert "decode: still running when this was written" in seen["md"] and "| 64 | 5000 | 1000 |" in seen["md"]
    final = json.loads((out / "results.json").read_text())["decode"]  # the child's end: kept, with its exit
    assert final["stopped"] == "-9" and final["rows"] == partial["rows"]


def test_run_teed_ticks_while_the_child_runs():
    import sys

    ticks = []
    code, _ = gpu_grpo._run_teed([sys.executable, "-c", "import time; time.sleep(1.5)"], env=None, timeout=60,
                                 tick=lambda: ticks.append(1), every=0.2)
    assert code == 0 and len(ticks) >= 3
    code, _ = gpu_grpo._run_teed([sys.executable, "-c", "import time; time.sleep(0.6)"], env=None, timeout=60,
                                 tick=lambda: 1 / 0, every=0.1)  # a failing tick is printed, not raised
    assert code == 0


def test_run_teed_passes_stderr_on_and_keeps_its_tail(capsys):
    import sys

    code, tail = gpu_grpo._run_teed([sys.executable, "-c", "import sys; print('one', file=sys.stderr); "
                                     "print('two', file=sys.stderr); sys.exit(3)"], env=None, timeout=60)
    assert (code, tail) == (3, ["one", "two"]) and "two" in capsys.readouterr().err
    code, _ = gpu_grpo._run_teed([sys.executable, "-c", "import time; time.sleep(30)"], env=None, timeout=1)
    assert code == "timeout"


def test_out_is_required_except_from_json(tmp_path):
    with pytest.raises(SystemExit):
        gpu_grpo.main(["--smoke"])
