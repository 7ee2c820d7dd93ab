"""The small offline tokenizer the peers load (EvalScope, AIPerf), with a chat template.

EvalScope and AIPerf load a Hugging Face tokenizer even when they count tokens from the
server's usage, and EvalScope 1.14.1 also applies the tokenizer's chat template to each prompt
("Failed to apply the chat template" without one). This writes, with the ``tokenizers``
library alone (no ``transformers``), a ``WordLevel`` tokenizer over the benchmark's prompt
vocabulary (:func:`bench.peers.common.prompt_text`) and the ``tokenizer_config.json`` that
``transformers.AutoTokenizer`` reads it with, carrying :data:`CHAT_TEMPLATE` (ChatML):

    .venv/bin/python -m bench.peers.tokenizer --out /tmp/peer-tokenizer

Point the peers at the directory with ``LOCUST_LLM_PEER_TOKENIZER`` (docs/metrics.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.peers.common import prompt_text

UNK, EOS = "[UNK]", "<|im_end|>"
SPECIAL = (UNK, "<|im_start|>", EOS)
#: ChatML, the shape of Qwen's template: each message as <|im_start|>role\n...<|im_end|>
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def vocabulary(prompts: int = 512) -> list[str]:
    """The special tokens, then every word of the benchmark's first ``prompts`` prompts and of
    the chat roles, in first-seen order."""
    words = dict.fromkeys([*SPECIAL, "system", "user", "assistant"])
    for i in range(prompts):
        words.update(dict.fromkeys(prompt_text(i).split()))
    return list(words)


def write(out: Path) -> Path:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` into ``out``; returns ``out``."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {word: i for i, word in enumerate(vocabulary())}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(list(SPECIAL))
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": UNK,
        "eos_token": EOS,
        "pad_token": EOS,
        "model_max_length": 32768,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--out", type=Path, required=True, help="the directory to write")
    args = p.parse_args(argv)
    print(write(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
