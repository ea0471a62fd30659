"""`hf_folder.load_tokenizer`'s refusal of a folder without tokenizer files, and what it lets through:
a folder whose tokenizer_config.json names a tokenizer class of the folder's own code (`auto_map`),
which reads files of its own naming (Qwen-1's `qwen.tiktoken`), loads when the model is trusted with
remote code (staff's `trust_remote_code`), and is still refused when it is not."""
import json

import pytest

from trainer.models.hf_folder import custom_tokenizer, load_tokenizer, tokenizer_files

# A tokenizer of the folder's own code: one token per word of `words.vocab`, a file none of the
# standard sets names.
TOKENIZER_CODE = '''
from transformers import PreTrainedTokenizer


class WordsTokenizer(PreTrainedTokenizer):
    vocab_files_names = {"vocab_file": "words.vocab"}

    def __init__(self, vocab_file, **kwargs):
        with open(vocab_file, encoding="utf-8") as f:
            self.words = [line.strip() for line in f if line.strip()]
        self.ids = {w: i for i, w in enumerate(self.words)}
        super().__init__(**kwargs)

    @property
    def vocab_size(self):
        return len(self.words)

    def get_vocab(self):
        return dict(self.ids)

    def _tokenize(self, text, **kwargs):
        return text.split()

    def _convert_token_to_id(self, token):
        return self.ids.get(token, self.ids["<unk>"])

    def _convert_id_to_token(self, index):
        return self.words[index]

    def save_vocabulary(self, save_directory, filename_prefix=None):
        return ()
'''


def _custom_folder(root):
    folder = root / "custom-tokenizer"
    folder.mkdir()
    (folder / "tokenization_words.py").write_text(TOKENIZER_CODE)
    (folder / "words.vocab").write_text("<unk>\n</s>\nhello\nworld\n")
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "WordsTokenizer", "unk_token": "<unk>", "eos_token": "</s>",
        "auto_map": {"AutoTokenizer": ["tokenization_words.WordsTokenizer", None]}}))
    return folder


def test_a_trusted_folder_with_its_own_tokenizer_code_loads(tmp_path):
    folder = _custom_folder(tmp_path)
    assert tokenizer_files(folder) == [] and custom_tokenizer(folder)
    tok = load_tokenizer(folder, trust_remote_code=True)
    assert tok.convert_tokens_to_ids(["hello", "world"]) == [2, 3]
    assert tok.eos_token == "</s>" and tok.pad_token == "</s>"  # the pad completed from the EOS


def test_the_same_folder_untrusted_and_a_bare_one_are_refused_naming_the_files(tmp_path):
    folder = _custom_folder(tmp_path)
    with pytest.raises(FileNotFoundError, match="no tokenizer files in the folder"):
        load_tokenizer(folder, trust_remote_code=False)
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    (bare / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "Qwen2Tokenizer"}))
    assert not custom_tokenizer(bare)
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        load_tokenizer(bare, trust_remote_code=True)  # trusted, but no code of its own: still refused
