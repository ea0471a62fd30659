"""Helpers shared by the backends that drive an inference engine of their own (sglang, vllm).

    config_value(config, key, default)   a rollout-config value from a dataclass or a dict; None -> default
    model_folder(model, backend)         the HF model folder an engine loads (a path, or a module's name_or_path)
    gpu_index(device)                    N of "cuda:N" (0 for "cuda" or anything else)
    bucket_named_tensors(pairs, bytes)   (name, tensor) pairs grouped into lists of at most `bytes`
    tensor_bytes(tensor)                 numel x element size
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator


def config_value(config: Any, key: str, default: Any) -> Any:
    """`config.key` (or `config[key]` for a dict); `default` when missing or None."""
    value = config.get(key, default) if isinstance(config, dict) else getattr(config, key, default)
    return default if value is None else value


def model_folder(model: Any, backend: str) -> str:
    """The model folder path: `model` itself when a string, else its `name_or_path`."""
    path = model if isinstance(model, str) else getattr(model, "name_or_path", None)
    if not path:
        raise ValueError(f"the {backend} engine needs the model folder path (or a module with name_or_path)")
    return str(path)


def gpu_index(device: Any) -> int:
    """The index of a "cuda:N" device (a string or a torch.device); 0 otherwise."""
    if not isinstance(device, str):
        index = getattr(device, "index", None)  # a torch.device
        if isinstance(index, int):
            return index
    text = "" if device is None else str(device)
    return int(text.split(":", 1)[1]) if text.startswith("cuda:") else 0


def tensor_bytes(tensor: Any) -> int:
    return int(tensor.numel()) * int(tensor.element_size())


def bucket_named_tensors(named_tensors: Iterable[tuple[str, Any]], bucket_bytes: int) -> Iterator[list[tuple[str, Any]]]:
    """Group (name, tensor) pairs into lists of at most `bucket_bytes` (a larger tensor goes alone)."""
    bucket: list[tuple[str, Any]] = []
    size = 0
    for name, tensor in named_tensors:
        nbytes = tensor_bytes(tensor)
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket
