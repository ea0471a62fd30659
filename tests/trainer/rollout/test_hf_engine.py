"""The hf rollout engine against plain `model.generate` and its own contracts (tiny model, CPU)."""
import pytest
import torch

from trainer.rollout.base import GenerationRequest, SamplingParams, available_engines, build_engine
from trainer.rollout.hf import HFRolloutEngine, sample_next

PROMPTS = [[5, 17, 33, 90, 12, 7], [40, 41], [100, 200, 300, 400, 500, 600, 700, 11, 12, 13], [9]]


@pytest.fixture(scope="module")
def engine(tiny_model, tiny_tokenizer):
    return build_engine("hf", model=tiny_model, tokenizer=tiny_tokenizer, config=None, device="cpu")


def _reference_generate(model, prompts, new_tokens, pad):
    """Plain HF greedy generation with left padding and no stop tokens."""
    from transformers import GenerationConfig

    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    gc = GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                          pad_token_id=pad, eos_token_id=None)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=gc)
    return out[:, width:].tolist()


def _greedy(prompts, n=24, stops=()):
    return [GenerationRequest(str(i), p, SamplingParams(temperature=0.0, max_new_tokens=n, stop_token_ids=list(stops)))
            for i, p in enumerate(prompts)]


def test_registry():
    assert {"hf", "sglang", "auto"} <= set(available_engines())
    with pytest.raises(KeyError, match="unknown rollout engine"):
        build_engine("nope", model=None, tokenizer=None, config=None, device="cpu")


@pytest.mark.parametrize("fast", [True, False], ids=["fast_decode", "module_decode"])
def test_greedy_equals_generate_with_and_without_padding(fast, tiny_model, tiny_tokenizer):
    pad = tiny_tokenizer.pad_token_id
    engine = HFRolloutEngine(tiny_model, pad_token_id=pad, device="cpu", fast_decode=fast)
    batched = engine.generate(_greedy(PROMPTS))
    assert engine.last_stats["fast_decode"] == float(fast)
    assert [o.output_ids for o in batched] == _reference_generate(tiny_model, PROMPTS, 24, pad)
    for prompt, out in zip(PROMPTS, batched):  # one prompt, no padding at all
        assert [out.output_ids] == _reference_generate(tiny_model, [prompt], 24, pad)
        assert out.finish_reason == "length" and len(out.logprobs) == 24
        assert all(lp <= 0.0 for lp in out.logprobs)


def test_greedy_logprobs_match_a_full_forward(engine, tiny_model):
    out = engine.generate(_greedy([PROMPTS[0]], n=8))[0]
    ids = torch.tensor([PROMPTS[0] + out.output_ids])
    with torch.no_grad():
        logp = torch.log_softmax(tiny_model(ids).logits.float(), -1)[0]
    start = len(PROMPTS[0])
    want = [logp[start - 1 + t, tok].item() for t, tok in enumerate(out.output_ids)]
    assert out.logprobs == pytest.approx(want, abs=1e-4)


@pytest.mark.parametrize("fast", [True, False], ids=["fast_decode", "module_decode"])
def test_stop_tokens_and_rows_leaving_the_batch(fast, tiny_model):
    engine = HFRolloutEngine(tiny_model, pad_token_id=0, device="cpu", fast_decode=fast)
    free = engine.generate(_greedy(PROMPTS))
    # Stop each row on the token it emits at a different step, so rows leave at different times.
    stops = [o.output_ids[k] for o, k in zip(free, (2, 5, 0, 9))]
    reqs = [GenerationRequest(str(i), p, SamplingParams(temperature=0.0, max_new_tokens=24, stop_token_ids=[s]))
            for i, (p, s) in enumerate(zip(PROMPTS, stops))]
    outs = engine.generate(reqs)
    for o, f, s in zip(outs, free, stops):
        k = f.output_ids.index(s)
        assert o.output_ids == f.output_ids[: k + 1]  # same tokens as the free run, up to the stop
        assert o.finish_reason == "stop" and o.output_ids[-1] == s
    assert engine.last_stats["decode_row_steps"] < 4 * engine.last_stats["decode_steps"]


def test_max_new_tokens_per_request(engine):
    reqs = [GenerationRequest(str(i), p, SamplingParams(temperature=1.0, max_new_tokens=m, seed=i))
            for i, (p, m) in enumerate(zip(PROMPTS, (1, 7, 0, 13)))]
    outs = engine.generate(reqs)
    assert [len(o.output_ids) for o in outs] == [1, 7, 0, 13]
    assert [o.finish_reason for o in outs] == ["length"] * 4
    assert [o.request_id for o in outs] == ["0", "1", "2", "3"]


def test_seeded_sampling_reproducible(engine):
    def reqs(seed_offset):
        return [GenerationRequest(str(i), p, SamplingParams(temperature=1.0, top_p=0.9, top_k=50, max_new_tokens=16,
                                                            seed=100 + i + seed_offset))
                for i, p in enumerate(PROMPTS)]

    a, b, c = engine.generate(reqs(0)), engine.generate(reqs(0)), engine.generate(reqs(1000))
    assert [o.output_ids for o in a] == [o.output_ids for o in b]
    assert [o.output_ids for o in a] != [o.output_ids for o in c]
    # A seeded request samples the same alone as inside a batch.
    alone = engine.generate([reqs(0)[2]])[0]
    assert alone.output_ids == a[2].output_ids


def test_sample_next_filters_by_hand():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]] * 3))
    ones = torch.ones(3)
    greedy = torch.tensor([False, False, True])
    # top_k=1 -> always token 0; top_p=0.7 keeps {0, 1} (mass before token 2 is 0.8 >= 0.7).
    u = torch.tensor([0.99, 0.99, 0.99])
    tok, lp = sample_next(logits, ones, greedy, torch.tensor([1, 1 << 30, 1 << 30]),
                          torch.tensor([1.0, 0.7, 1.0]), u, any_sampled=True, any_filter=True)
    assert tok.tolist() == [0, 1, 0]
    assert lp.tolist() == pytest.approx([torch.log(torch.tensor(x)).item() for x in (0.5, 0.3, 0.5)], abs=1e-6)
    # No filtering: inverse CDF over (0.5, 0.8, 0.95, 1.0).
    tok, _ = sample_next(logits, ones, torch.zeros(3, dtype=torch.bool), torch.full((3,), 1 << 30),
                         torch.ones(3), torch.tensor([0.1, 0.6, 0.97]), any_sampled=True, any_filter=False)
    assert tok.tolist() == [0, 1, 3]


def test_update_weights_shared_and_copied(tiny_model, tiny_tokenizer):
    import copy

    shared = build_engine("hf", model=tiny_model, tokenizer=tiny_tokenizer, config=None, device="cpu")
    shared.update_weights(tiny_model.named_parameters())
    assert shared.last_stats["weights_copied"] == 0 and shared.last_stats["weights_shared"] > 0

    own = HFRolloutEngine(copy.deepcopy(tiny_model), pad_token_id=0, share_module=False)
    new = {k: v + 0.01 for k, v in tiny_model.state_dict().items() if v.is_floating_point()}
    own.update_weights(new.items())
    assert own.last_stats["weights_copied"] == len(new)
    got = dict(own.model.named_parameters())
    name = next(iter(got))
    assert torch.equal(got[name].detach(), new[name])
    with pytest.raises(KeyError):
        own.update_weights([("no.such.weight", torch.zeros(1))])
    with pytest.raises(ValueError, match="shape"):
        own.update_weights([(name, torch.zeros(1))])
    own.release_memory()
    own.resume_memory()
    own.flush_cache()
    assert len(own.generate(_greedy([PROMPTS[1]], n=3))[0].output_ids) == 3


def test_train_mode_restored(tiny_model, engine):
    tiny_model.train()
    try:
        engine.generate(_greedy([PROMPTS[0]], n=2))
        assert tiny_model.training
    finally:
        tiny_model.eval()


def test_shared_prompts_prefilled_once(engine):
    # n copies of each prompt (GRPO): one prefill row per distinct prompt, same results as separate.
    reqs = [GenerationRequest(f"{i}-{s}", p, SamplingParams(temperature=1.0, max_new_tokens=10, seed=10 * i + s))
            for i, p in enumerate(PROMPTS[:2]) for s in range(3)]
    outs = engine.generate(reqs)
    assert engine.last_stats["prefill_rows"] == 2 and engine.last_stats["batch_size"] == 6
    for r, o in zip(reqs, outs):
        assert engine.generate([r])[0].output_ids == o.output_ids
    greedy = engine.generate([GenerationRequest(str(s), PROMPTS[0], SamplingParams(temperature=0, max_new_tokens=8))
                              for s in range(3)])
    assert greedy[0].output_ids == greedy[1].output_ids == greedy[2].output_ids


def test_fast_decode_logits_equal_module_logits(tiny_model):
    from transformers import DynamicCache

    from trainer.rollout.fast_decode import DecodeState, FastDecoder, supports

    assert supports(tiny_model)
    ids = torch.tensor([[0, 0, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14]])
    mask = (torch.arange(6)[None] >= torch.tensor([[2], [0]])).long()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        caches = [DynamicCache(config=tiny_model.config) for _ in range(2)]
        for c in caches:
            tiny_model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=c, use_cache=True)
        state, fast = DecodeState.from_hf_cache(caches[0], 4), FastDecoder(tiny_model)
        tok, nxt, full = torch.tensor([20, 21]), pos[:, -1] + 1, torch.cat([mask, torch.ones(2, 4, dtype=torch.long)], -1)
        for s in range(3):
            a = fast.step(state, tok, nxt, full)
            b = tiny_model(input_ids=tok[:, None], attention_mask=full[:, : 7 + s], position_ids=nxt[:, None],
                           cache=caches[1], use_cache=True).logits[:, -1]
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
            tok, nxt = a.argmax(-1), nxt + 1


def test_two_level_inverse_cdf_equals_one_full_cumsum():
    # A vocabulary past the one-level limit, with a partial last block and stretches of zero weight.
    from trainer.rollout import hf

    vocab = hf._ONE_LEVEL_MAX + 3 * hf._BLOCK + 517
    gen = torch.Generator().manual_seed(0)
    weights = torch.rand(6, vocab, generator=gen) ** 8
    weights[:, 2000:9000] = 0.0
    weights[1, : vocab - 3] = 0.0  # all the mass in the tail block
    weights[2, -hf._BLOCK:] = 0.0  # none in the last blocks
    for trial in range(40):
        u = torch.rand(6, generator=gen)
        if trial == 0:
            u = torch.tensor([0.0, 1 - 2 ** -24, 0.5, 1 - 2 ** -24, 1e-9, 0.999999])
        tokens, total = hf._inverse_cdf(weights, u)
        cdf = weights.double().cumsum(-1)
        want = torch.searchsorted(cdf, (u.double() * cdf[:, -1]).unsqueeze(-1), right=True).squeeze(-1)
        assert tokens.tolist() == want.tolist()
        assert bool((weights.gather(-1, tokens[:, None]) > 0).all())
        torch.testing.assert_close(total, cdf[:, -1], rtol=1e-6, atol=0)


def test_block_argmax_equals_max_ties_included():
    from trainer.rollout import hf

    vocab = hf._ONE_LEVEL_MAX + hf._BLOCK + 3
    x = torch.randn(4, vocab, generator=torch.Generator().manual_seed(1))
    x[1, [5000, 7000]] = 50.0  # a tie: the first one wins
    x[2, -1] = 50.0  # the max in the partial last block
    x[3, :] = -1.0  # all equal
    top, idx = hf._argmax_rows(x)
    want_top, want_idx = x.max(dim=-1, keepdim=True)
    assert torch.equal(top, want_top) and idx.tolist() == want_idx.tolist() == [[want_idx[0, 0].item()], [5000],
                                                                                  [vocab - 1], [0]]


@pytest.mark.parametrize("mode", ["greedy", "sample", "filtered", "mixed"])
def test_sample_next_logprobs_at_a_large_vocabulary(mode):
    # Qwen's vocabulary size: the block paths. The log-prob is log_softmax(logits / T) at the token,
    # whether or not the call may overwrite the logits; inplace=False leaves them as they were.
    vocab, b = 151_936, 5
    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(b, vocab, generator=gen) * 4
    temps = torch.tensor([0.7, 1.0, 1.3, 0.5, 1.0])
    greedy = torch.tensor([mode == "greedy" or (mode == "mixed" and i % 2 == 0) for i in range(b)])
    temps = torch.where(greedy, torch.ones(b), temps)
    top_k = torch.full((b,), 20 if mode == "filtered" else 1 << 30)
    top_p = torch.full((b,), 0.8 if mode == "filtered" else 1.0)
    u = torch.rand(b, generator=gen)
    kw = dict(any_sampled=mode != "greedy", any_filter=mode == "filtered")
    before = logits.clone()
    tok, lp = sample_next(logits, temps, greedy, top_k, top_p, u, **kw)
    assert torch.equal(logits, before)
    tok2, lp2 = sample_next(logits.clone(), temps, greedy, top_k, top_p, u, inplace=True, **kw)
    assert tok.tolist() == tok2.tolist() and torch.equal(lp, lp2)
    ref = torch.log_softmax(logits.double() / temps.double()[:, None], -1)
    torch.testing.assert_close(lp.double(), ref.gather(-1, tok[:, None]).squeeze(-1), rtol=0, atol=2e-5)
    assert tok[greedy].tolist() == logits[greedy].argmax(-1).tolist()
    if mode == "filtered":  # each token inside its row's top 20
        ranks = (logits > logits.gather(-1, tok[:, None])).sum(-1)
        assert bool((ranks < 20).all())
    if mode == "sample":  # the inverse CDF of softmax(logits / T) at u, as one full cumsum gives it
        cdf = ref.exp().cumsum(-1)
        want = torch.searchsorted(cdf, (u.double() * cdf[:, -1]).unsqueeze(-1), right=True).squeeze(-1)
        assert tok.tolist() == want.tolist()
