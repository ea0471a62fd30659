"""The vllm backend and its stand-in against the pinned vLLM release's own source (no GPU, no import).

The wheel of the `vllm` extra's version is fetched once with `pip download --no-deps` into the
fixture cache (239 MB, a few seconds from the registry; a cached wheel is reused) and only the .py
members the checks ask for are read from it, with `ast` (tests/fixtures/wheel_source.py). What the
backend uses is read from trainer/rollout/vllm.py the same way (tests/trainer/rollout/vllm_conformance.py),
so a call added there is checked here without editing this file. The test skips only when pip cannot
reach the registry.

The later tests edit one line of the parsed release, the backend or the stand-in, as a new vLLM
version or a careless edit would, and check that the conformance check names what broke.
"""
from __future__ import annotations

import time
import zipfile

import pytest

from tests.fixtures.wheel_source import PackageSource, RegistryUnreachable, fetch_wheel, pinned_requirement
from tests.trainer.rollout.vllm_conformance import BACKEND, STAND_IN, backend_usage, check, stand_in

REQUIREMENT = pinned_requirement("vllm")
VERSION = REQUIREMENT.removeprefix("vllm")
LLM = "vllm/entrypoints/llm.py"
RL = "vllm/entrypoints/rl/offline.py"


@pytest.fixture(scope="module")
def release() -> PackageSource:
    try:
        wheel = fetch_wheel(REQUIREMENT)
    except RegistryUnreachable as exc:
        pytest.skip(f"the package registry cannot be reached, so {REQUIREMENT} cannot be fetched: {exc}")
    return PackageSource.from_wheel(wheel)


def problems(src: PackageSource, backend: str | None = None, fake: str | None = None) -> list[str]:
    return check(src, backend_usage(backend), stand_in(fake), VERSION)


def test_backend_and_stand_in_conform_to_the_pinned_release(release):
    t0 = time.perf_counter()
    found = problems(release)
    assert found == [], "\n".join(found)
    # Only what the checks need is read from the 239 MB wheel: a few dozen of its ~3,600 .py files.
    assert release.files.members_read < 200 and time.perf_counter() - t0 < 20


def test_the_backend_usage_is_read_from_its_source():
    """The check cannot pass by seeing nothing: what the backend calls and reads is all found."""
    usage = backend_usage()
    assert {c.method for c in usage.calls} == {"generate", "sleep", "wake_up", "init_weight_transfer_engine",
                                                "start_weight_update", "update_weights", "finish_weight_update",
                                                "reset_prefix_cache"}
    assert {"model", "enable_sleep_mode", "gpu_memory_utilization", "max_model_len", "seed", "dtype",
            "tensor_parallel_size", "weight_transfer_config"} <= set(usage.constructor)
    assert usage.constructor_strings == {"logprobs_mode": "processed_logprobs"}
    assert usage.transfer_config.keys() == {"backend"} and usage.transfer_backend == "ipc"
    assert {"temperature", "top_p", "top_k", "max_tokens", "stop_token_ids", "ignore_eos", "seed", "logprobs",
            "skip_special_tokens", "detokenize"} <= set(usage.sampling_keys)
    assert set(usage.prompt_keys) == {"prompt_token_ids"}
    assert {("outputs", "[]", "token_ids"), ("outputs", "[]", "finish_reason"), ("outputs", "[]", "stop_reason"),
            ("outputs", "[]", "logprobs", "[]", "[]", "logprob")} <= set(usage.result_paths)
    assert set(usage.finish_reasons) == {"stop", "length"}
    update = next(c for c in usage.calls if c.method == "update_weights")
    assert set(update.request["update_info"]) == {"names", "dtype_names", "shapes", "ipc_handles"}
    assert usage.sleep_tags == ("weights", "kv_cache")


def test_the_install_guide_names_each_pin_the_extra_moves(release):
    """vLLM's own requirements (its METADATA) replace some of the trainer's pins (requirements.txt)
    where the extra is installed; docs/install.md's vLLM section names each, with vLLM's specifiers."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    root = BACKEND.parents[2]
    with zipfile.ZipFile(release.files.wheel) as wheel:  # the one non-.py member read
        meta = wheel.read(f"vllm-{VERSION.removeprefix('==')}.dist-info/METADATA").decode()
    needs = {}
    for line in meta.splitlines():
        if line.startswith("Requires-Dist: "):
            req = Requirement(line.removeprefix("Requires-Dist: "))
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                needs[canonicalize_name(req.name)] = req
    pins = {}
    for line in (root / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            req = Requirement(line)
            pins[canonicalize_name(req.name)] = (line, next(iter(req.specifier)).version)
    moved = {name: (pin, needs[name]) for name, (pin, version) in pins.items()
             if name in needs and not needs[name].specifier.contains(version, prereleases=True)}
    assert {"torch", "transformers"} <= set(moved)  # vllm==0.34.0: torch==2.14.0, transformers<5.23
    guide = (root / "docs" / "install.md").read_text()
    section = guide.split("## vLLM", 1)[1].split("\n## ", 1)[0]
    for name, (pin, req) in moved.items():
        assert f"`{pin}`" in section, f"install.md's vLLM section does not name the pin {pin} the extra replaces"
        for spec in req.specifier:
            assert f"{spec}" in section, f"install.md's vLLM section does not give vLLM's {name}{spec}"


def test_a_renamed_llm_method_is_named(release):
    src = release.replace(RL, "    def start_weight_update(self) -> None:", "    def begin_weight_update(self) -> None:")
    found = problems(src)
    assert any("vllm.LLM.start_weight_update does not exist" in p for p in found), found


def test_a_renamed_parameter_is_named(release):
    src = release.replace(LLM, "    def wake_up(self, tags: list[str] | None = None) -> bool:",
                          "    def wake_up(self, regions: list[str] | None = None) -> bool:")
    found = problems(src)
    assert any("vllm.LLM.wake_up has no parameter 'tags'" in p for p in found), found
    assert any("stand-in: FakeLLM.wake_up" in p and "regions" in p for p in found), found


def test_an_engine_args_field_checked_through_llm_kwargs(release):
    """LLM(**kwargs) builds EngineArgs: enable_sleep_mode is one of its fields, not an LLM parameter."""
    src = release.replace("vllm/engine/arg_utils.py", "    enable_sleep_mode: bool = ModelConfig.enable_sleep_mode",
                          "    sleep_mode: bool = ModelConfig.enable_sleep_mode")
    assert any("keyword 'enable_sleep_mode'" in p and "EngineArgs" in p for p in problems(src))


def test_sampling_and_result_fields_follow_the_release(release):
    src = release.replace("vllm/sampling_params.py", "    detokenize: bool = True\n    \"\"\"Whether",
                          "    detokenise: bool = True\n    \"\"\"Whether")
    src = src.replace("vllm/outputs.py", "    stop_reason: int | str | None = None", "    stop_cause: int | str | None = None")
    src = src.replace("vllm/logprobs.py", "    logprob: float\n", "    value: float\n")
    found = problems(src)
    assert any("SamplingParams keyword 'detokenize'" in p for p in found), found
    assert any("outputs.[].stop_reason: no attribute 'stop_reason' on CompletionOutput" in p for p in found), found
    assert any(".logprob: no attribute 'logprob' on FlatLogprobs, Logprob" in p for p in found), found
    assert any("stand-in: CompletionOutput.stop_reason is not an attribute" in p for p in found), found


def test_finish_reasons_sleep_tags_and_weight_transfer_follow_the_release(release):
    src = release.replace("vllm/v1/engine/__init__.py", '("stop", "length", "abort"', '("stop", "max_tokens", "abort"')
    src = src.replace("vllm/v1/executor/abstract.py", 'SLEEP_TAGS = frozenset(("weights", "kv_cache"))',
                      'SLEEP_TAGS = frozenset(("weights", "kv_cache", "cuda_graph"))')
    src = src.replace("vllm/distributed/weight_transfer/ipc_engine.py", "    dtype_names: list[str]\n",
                      "    dtypes: list[str]\n")
    found = problems(src)
    assert any("finish_reason 'length'" in p for p in found), found
    assert any("VLLM_SLEEP_TAGS" in p and "cuda_graph" in p for p in found), found
    assert any("update_info key 'dtype_names'" in p and "IPCWeightTransferUpdateInfo" in p for p in found), found


def test_a_weight_transfer_backend_no_longer_registered_is_named(release):
    src = release.replace("vllm/distributed/weight_transfer/factory.py",
                          'WeightTransferEngineFactory.register_engine(\n    "ipc",',
                          'WeightTransferEngineFactory.register_engine(\n    "cuda_ipc",')
    assert any("weight-transfer backend 'ipc'" in p for p in problems(src))


def test_a_new_backend_call_is_checked_without_editing_the_test(release):
    backend = BACKEND.read_text().replace(
        "    def flush_cache(self) -> None:\n",
        "    def probe(self) -> None:\n        self.llm.collective_rpc(\"ping\", timeout_s=3)\n\n"
        "    def flush_cache(self) -> None:\n")
    found = problems(release, backend=backend)
    assert any("vllm.LLM.collective_rpc has no parameter 'timeout_s'" in p for p in found), found
    assert any("FakeLLM.collective_rpc is missing" in p for p in found), found
    bad_mode = BACKEND.read_text().replace('"processed_logprobs"', '"processed"')
    assert any("logprobs_mode='processed'" in p for p in problems(release, backend=bad_mode))


def test_stand_in_drift_is_named(release):
    fake = STAND_IN.read_text().replace("    def sleep(self, level=1, mode=\"abort\", reset_connector=True):",
                                        "    def sleep(self, level=1):")
    fake = fake.replace("class FakeLLM:\n", "class FakeLLM:\n    def pause(self):\n        pass\n\n")
    found = problems(release, fake=fake)
    assert any("FakeLLM.sleep" in p and "parameter 2" in p for p in found), found
    assert any("FakeLLM.pause is not a method of vllm.LLM" in p for p in found), found
