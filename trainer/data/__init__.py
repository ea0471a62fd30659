"""trainer.data: prompt datasets (read, normalise, template, filter) and the resumable prompt loader."""
from trainer.data.dataset import (DataError, PromptDataset, PromptRecord, build_prompt_dataset,
                                  load_prompt_dataset, read_rows)
from trainer.data.loader import PromptLoader, all_items, chunks

__all__ = ["DataError", "PromptDataset", "PromptRecord", "PromptLoader", "all_items", "chunks",
           "build_prompt_dataset", "load_prompt_dataset", "read_rows"]
