"""The sglang backend and its stand-in against the pinned SGLang release's own source (no GPU, no import).

The wheel of the `sglang` extra's version is fetched once with `pip download --no-deps` into the
fixture cache (about 39 MB, about 2 s from the registry; a cached wheel is reused) and read with
`ast` (tests/fixtures/wheel_source.py). What the backend uses is read from trainer/rollout/sglang.py
the same way (tests/trainer/rollout/sglang_conformance.py), so a call added there is checked here
without editing this file. The test skips only when pip cannot reach the registry.

The later tests edit one line of the parsed release, the backend or the stand-in, as a new SGLang
version or a careless edit would, and check that the conformance check names what broke.
"""
from __future__ import annotations

import os

import pytest

from tests.fixtures.wheel_source import PackageSource, RegistryUnreachable, fetch_wheel, pinned_requirement
from tests.trainer.rollout.sglang_conformance import BACKEND, STAND_IN, backend_usage, check, stand_in

ENGINE = "sglang/srt/entrypoints/engine.py"
VERSION = pinned_requirement().removeprefix("sglang")


@pytest.fixture(scope="module")
def release() -> PackageSource:
    try:
        wheel = fetch_wheel()
    except RegistryUnreachable as exc:
        pytest.skip(f"the package registry cannot be reached, so {pinned_requirement()} cannot be fetched: {exc}")
    return PackageSource.from_wheel(wheel)


def problems(src: PackageSource, backend: str | None = None, fake: str | None = None) -> list[str]:
    return check(src, backend_usage(backend), stand_in(fake), VERSION)


def test_backend_and_stand_in_conform_to_the_pinned_release(release):
    found = problems(release)
    assert found == [], "\n".join(found)


def test_the_backend_usage_is_read_from_its_source():
    """The check cannot pass by seeing nothing: what the backend calls and reads is all found."""
    usage = backend_usage()
    assert {c.method for c in usage.calls} == {"async_generate", "update_weights_from_tensor", "release_memory_occupation",
                                                "resume_memory_occupation", "flush_cache", "shutdown"}
    assert [c.awaited for c in usage.calls if c.method == "async_generate"] == [True]
    assert {"model_path", "mem_fraction_static", "skip_tokenizer_init", "context_length"} <= set(usage.constructor)
    assert {"temperature", "top_k", "stop_token_ids", "sampling_seed"} <= set(usage.sampling_keys)
    assert {("output_ids",), ("meta_info", "finish_reason", "type"), ("meta_info", "output_token_logprobs")} \
        <= set(usage.result_paths)
    assert set(usage.finish_types) == {"abort", "stop", "length"}
    assert set(usage.attributes) == {"loop"} and usage.memory_tags


def test_a_renamed_engine_method_is_named(release):
    src = release.replace(ENGINE, "    def update_weights_from_tensor(\n", "    def update_weights_from_tensors(\n")
    assert any("sglang.Engine.update_weights_from_tensor does not exist" in p for p in problems(src))


def test_a_dropped_parameter_is_named(release):
    src = release.replace(ENGINE, "    def release_memory_occupation(self, tags: Optional[List[str]] = None):",
                          "    def release_memory_occupation(self, regions: Optional[List[str]] = None):")
    found = problems(src)
    assert any("sglang.Engine.release_memory_occupation has no parameter 'tags'" in p for p in found), found
    assert any("stand-in: FakeSGLangEngine.release_memory_occupation" in p and "regions" in p for p in found), found


def test_a_constructor_keyword_checked_through_server_args(release):
    """Engine(**kwargs) builds ServerArgs, whose fields SGLang gathers from its argument groups."""
    src = release.replace("sglang/srt/arg_groups/fields/device.py", "    base_gpu_id: A[", "    first_gpu_id: A[")
    assert any("keyword 'base_gpu_id'" in p and "ServerArgs" in p for p in problems(src))


def test_a_field_the_request_object_lost_is_named(release):
    src = release.replace("sglang/srt/managers/io_struct.py", "    return_logprob: Optional[Union[List[bool], bool]] = None",
                          "    want_logprob: Optional[Union[List[bool], bool]] = None")
    assert any("passes 'return_logprob' on as GenerateReqInput.return_logprob" in p for p in problems(src))


def test_a_result_field_and_a_finish_type_no_longer_built(release):
    src = release.replace("sglang/srt/managers/tokenizer_manager.py", 'meta_info["output_token_logprobs"] =',
                          'meta_info["token_logprobs"] =')
    src = src.replace("sglang/srt/managers/schedule_batch.py", '"type": "length",', '"type": "max_tokens",')
    found = problems(src)
    assert any("result field meta_info.output_token_logprobs" in p for p in found), found
    assert any("finish_reason type 'length'" in p for p in found), found


def test_memory_tags_follow_the_release(release):
    src = release.replace("sglang/srt/constants.py", "    GPU_MEMORY_TYPE_CUDA_GRAPH,\n]", "]")
    assert any("SGLANG_MEMORY_TAGS" in p and "GPU_MEMORY_ALL_TYPES" in p for p in problems(src))


def test_a_new_backend_call_is_checked_without_editing_the_test(release):
    backend = BACKEND.read_text().replace(
        "    def flush_cache(self) -> None:\n",
        "    def probe(self) -> None:\n        self.engine.get_weights_by_name(name=\"w\", truncate=3)\n\n"
        "    def flush_cache(self) -> None:\n")
    found = problems(release, backend=backend)
    assert any("sglang.Engine.get_weights_by_name has no parameter 'truncate'" in p for p in found), found
    assert any("FakeSGLangEngine.get_weights_by_name is missing" in p for p in found), found


def test_stand_in_drift_is_named(release):
    fake = STAND_IN.read_text()
    fake = fake.replace("def update_weights_from_tensor(self, named_tensors, load_format=None, flush_cache=True):",
                        "def update_weights_from_tensor(self, named_tensors, flush_cache=True):")
    fake = fake.replace("    def flush_cache(self):\n        return self.loop.run_until_complete(self._control((\"flush\",)))",
                        "    def flush_cache(self):\n        self.calls.append((\"flush\",))")
    found = problems(release, fake=fake)
    assert any("FakeSGLangEngine.update_weights_from_tensor" in p and "parameter 2" in p for p in found), found
    assert any("FakeSGLangEngine.flush_cache must too" in p for p in found), found


def test_fetch_skips_only_for_an_unreachable_registry(tmp_path, monkeypatch):
    """No registry: RegistryUnreachable (the skip). A registry without the version: a failure."""
    monkeypatch.setenv("RLSTUDIO_FIXTURE_CACHE", str(tmp_path))
    with monkeypatch.context() as m:
        m.setenv("PIP_CONFIG_FILE", os.devnull)
        m.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens on the discard port
        m.setenv("PIP_EXTRA_INDEX_URL", "")
        m.setenv("PIP_FIND_LINKS", "")
        with pytest.raises(RegistryUnreachable, match="Connection refused|NewConnectionError"):
            fetch_wheel()
    try:
        with pytest.raises(RuntimeError, match="sglang==0.0.0 failed"):
            fetch_wheel("sglang==0.0.0")
    except RegistryUnreachable as exc:
        pytest.skip(f"the package registry cannot be reached: {exc}")
