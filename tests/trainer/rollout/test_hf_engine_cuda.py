"""The hf engine on a CUDA device (gpu marker: deselected by default, skipped without a GPU)."""
import pytest
import torch

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_greedy_matches_generate_and_release_resume(tiny_model_dir):
    import copy

    from transformers import AutoModelForCausalLM, GenerationConfig

    from trainer.rollout.base import GenerationRequest, SamplingParams
    from trainer.rollout.hf import HFRolloutEngine

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).to("cuda").eval()
    prompts = [[5, 17, 33, 90], [40, 41, 42, 43, 44, 45, 46]]
    engine = HFRolloutEngine(copy.deepcopy(model), pad_token_id=0, device="cuda", share_module=False)
    outs = engine.generate([GenerationRequest(str(i), p, SamplingParams(temperature=0, max_new_tokens=16))
                            for i, p in enumerate(prompts)])
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts], device="cuda")
    mask = (ids != 0).long()
    gc = GenerationConfig(max_new_tokens=16, min_new_tokens=16, do_sample=False, pad_token_id=0, eos_token_id=None)
    ref = model.generate(input_ids=ids, attention_mask=mask, generation_config=gc)[:, width:].tolist()
    assert [o.output_ids for o in outs] == ref
    engine.release_memory()
    assert next(engine.model.parameters()).device.type == "cpu"
    with pytest.raises(RuntimeError, match="resume_memory"):
        engine.generate([GenerationRequest("x", prompts[0], SamplingParams(max_new_tokens=2))])
    engine.resume_memory()
    assert next(engine.model.parameters()).device.type == "cuda"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graph_decode_equals_the_eager_steps(tiny_model_dir):
    """The static step captured as CUDA graphs gives the eager steps' tokens, rows leaving the batch
    (a new graph per batch size) included."""
    from transformers import AutoModelForCausalLM

    from trainer.rollout.base import GenerationRequest, SamplingParams
    from trainer.rollout.hf import HFRolloutEngine

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).to("cuda").eval()
    prompts = [[5, 17, 33, 90], [40, 41, 42, 43, 44, 45, 46], [9], [100, 200, 300]] * 4

    def reqs(stops=()):
        return [GenerationRequest(str(i), p, SamplingParams(temperature=0, max_new_tokens=40, stop_token_ids=list(stops)))
                for i, p in enumerate(prompts)]

    sliced = HFRolloutEngine(model, pad_token_id=0, device="cuda", static_decode=False)
    graphs = HFRolloutEngine(model, pad_token_id=0, device="cuda")
    eager = HFRolloutEngine(model, pad_token_id=0, device="cuda", cuda_graphs=False)
    ref = sliced.generate(reqs())
    assert [o.output_ids for o in graphs.generate(reqs())] == [o.output_ids for o in ref]
    assert graphs.last_stats["cuda_graphs"] >= 1 and graphs.last_stats["host_syncs"] <= 40 // 16 + 1
    assert [o.output_ids for o in eager.generate(reqs())] == [o.output_ids for o in ref]
    assert eager.last_stats["cuda_graphs"] == 0
    stops = sorted({o.output_ids[k] for o, k in zip(ref, (3, 9, 20, 30))})
    want, got = sliced.generate(reqs(stops)), graphs.generate(reqs(stops))
    assert [o.output_ids for o in got] == [o.output_ids for o in want]
    assert [o.finish_reason for o in got] == [o.finish_reason for o in want]
