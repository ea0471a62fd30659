"""The `hf` engine's decode reads the device once per `sync_every` tokens, not once per token
(bench/host_reads.py counts the reads a GPU would wait on; the engine's code is the same on the CPU)."""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from host_reads import HostReads  # noqa: E402

from trainer.rollout.base import GenerationRequest, SamplingParams  # noqa: E402
from trainer.rollout.hf import HFRolloutEngine  # noqa: E402

PROMPTS = [[5, 17, 33, 90, 12, 7], [40, 41], [100, 200, 300, 400, 500, 600, 700, 11, 12, 13], [9]]


def test_counts_value_reads():
    t = torch.tensor([1.0, 2.0])
    with HostReads() as reads:
        bool(t.any())
        t.tolist()
        t[0].item()
        float(t[1])
        _ = t + 1  # no read
    assert reads.count == 4 and reads.by_name["tolist"] == 1


@pytest.mark.parametrize("mode", [(1.0, -1, 1.0), (0.0, -1, 1.0), (0.7, 20, 0.8)], ids=["sample", "greedy", "filtered"])
@pytest.mark.parametrize("static", [False, True], ids=["sliced", "static"])
def test_decode_reads_once_per_sync_interval(tiny_model, mode, static):
    temp, top_k, top_p = mode
    new, every = 48, 16
    reqs = [GenerationRequest(str(i), p, SamplingParams(temperature=temp, top_k=top_k, top_p=top_p,
                                                        max_new_tokens=new, seed=i))
            for i, p in enumerate(PROMPTS)]
    per_token = HFRolloutEngine(tiny_model, pad_token_id=0, device="cpu", static_decode=static)
    interval = HFRolloutEngine(tiny_model, pad_token_id=0, device="cpu", static_decode=static, sync_every=every)
    with HostReads() as every_token:
        a = per_token.generate(reqs)
    with HostReads() as few:
        b = interval.generate(reqs)
    assert [o.output_ids for o in a] == [o.output_ids for o in b]  # the same tokens either way
    assert every_token.count >= new  # a read per token (the CPU's default: no sync to save there)
    # A handful of reads to set the batch up and hand the results back, then one per interval.
    assert few.count <= new // every + 12, few.by_name
    assert interval.last_stats["host_syncs"] == new // every


def test_rows_that_end_between_reads_keep_their_own_tokens(tiny_model):
    free = HFRolloutEngine(tiny_model, pad_token_id=0, device="cpu").generate(
        [GenerationRequest(str(i), p, SamplingParams(temperature=0.0, max_new_tokens=24)) for i, p in enumerate(PROMPTS)])
    stops = [o.output_ids[k] for o, k in zip(free, (2, 5, 0, 9))]
    reqs = [GenerationRequest(str(i), p, SamplingParams(temperature=0.0, max_new_tokens=24, stop_token_ids=[s]))
            for i, (p, s) in enumerate(zip(PROMPTS, stops))]
    for static in (False, True):
        engine = HFRolloutEngine(tiny_model, pad_token_id=0, device="cpu", sync_every=7, static_decode=static)
        for o, f, s in zip(engine.generate(reqs), free, stops):
            k = f.output_ids.index(s)
            assert o.output_ids == f.output_ids[: k + 1] and o.finish_reason == "stop"
            assert len(o.logprobs) == k + 1


def test_ignore_eos_runs_every_row_to_its_budget(tiny_model):
    free = HFRolloutEngine(tiny_model, pad_token_id=0, device="cpu").generate(
        [GenerationRequest(str(i), p, SamplingParams(temperature=0.0, max_new_tokens=12)) for i, p in enumerate(PROMPTS)])
    stops = sorted({o.output_ids[1] for o in free})
    outs = HFRolloutEngine(tiny_model, pad_token_id=0, device="cpu", static_decode=True, sync_every=4).generate(
        [GenerationRequest(str(i), p, SamplingParams(temperature=0.0, max_new_tokens=12, stop_token_ids=stops,
                                                     ignore_eos=True)) for i, p in enumerate(PROMPTS)])
    assert [o.output_ids for o in outs] == [o.output_ids for o in free]
    assert {o.finish_reason for o in outs} == {"length"}
