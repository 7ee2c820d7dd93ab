"""A tiny random-weight Llama in Hugging Face layout for the vLLM engine tests (no model hub).

:func:`tiny_llama` writes once per machine, under the build script's cache
(``$LOCUST_LLM_CACHE`` or ``~/.cache/locust-llm``), in a couple of seconds:

* ``config.json``: ``LlamaForCausalLM``, 12 layers, 768 wide, 12 query heads over 4 KV heads,
  bf16, 4096 positions (about 77 M parameters, 154 MB: 30-50 ms a token on one core, slow enough
  that vLLM's front end and the client, sharing the other core, keep up with the engine);
* ``model.safetensors``: random bf16 weights, written with numpy alone (the safetensors format
  is an 8-byte header length, a JSON header and the raw tensors), so the test venv needs no torch;
* ``tokenizer.json`` + ``tokenizer_config.json``: a byte-level BPE vocabulary trained here with
  the ``tokenizers`` package on the prompt builders' own word list (so a prompt word is about one
  token), the ChatML control tokens of :mod:`llamacpp.model` and its chat template, so vLLM and
  locust-llm's ``--llm-tokenizer`` count a prompt the same way.

The weights are random, so the model's text is noise; its output projection lets it pick only
tokens of printable ASCII text (never an end-of-sequence token, nor a token whose text is empty
on its own, which would make a stream chunk without text), so every request runs to its
``max_tokens`` and every token reaches the client as it is generated. The tests send
``ignore_eos`` as well.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import struct
from dataclasses import asdict, dataclass
from pathlib import Path

from llamacpp.model import CHAT_TEMPLATE, SPECIAL_TOKENS, byte_to_unicode

from locust_llm.workloads.texts import WORDS


@dataclass(frozen=True, slots=True)
class LlamaShape:
    """The model's sizes (the cache key, with :data:`FORMAT`)."""

    hidden: int = 768
    layers: int = 12
    heads: int = 12
    kv_heads: int = 4
    intermediate: int = 2048
    vocab: int = 1024  # the BPE trainer's target; the trained size is used
    positions: int = 4096
    seed: int = 0


#: Bumped when the files written change for the same shape.
FORMAT = 2
NAME = "tiny-llama"


def cache_root() -> Path:
    """Where the build script caches (``$LOCUST_LLM_CACHE`` or ``~/.cache/locust-llm``)."""
    return Path(os.environ.get("LOCUST_LLM_CACHE") or Path.home() / ".cache" / "locust-llm")


def tiny_llama(shape: LlamaShape = LlamaShape()) -> Path:
    """The model folder for ``shape``, written on first use (atomically: a rename)."""
    key = hashlib.sha256(json.dumps([FORMAT, asdict(shape)]).encode()).hexdigest()[:12]
    folder = cache_root() / f"vllm-{NAME}-{key}"
    if (folder / "model.safetensors").is_file():
        return folder
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    special_ids, vocab, generable = _write_tokenizer(tmp, shape)
    _write_weights(tmp / "model.safetensors", shape, vocab, generable)
    _write_config(tmp, shape, special_ids, vocab)
    try:
        tmp.rename(folder)
    except OSError:  # another process wrote it first
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _training_text(seed: int, lines: int = 4000) -> list[str]:
    """Sentences of the prompt builders' words, with some punctuation and digits."""
    rng = random.Random(seed)
    extra = [",", ".", "?", "!", "0", "1", "2", "3", "42", "2024", "the", "a", "of", "to", "is"]
    pool = [*WORDS, *extra]
    return [" ".join(rng.choices(pool, k=rng.randint(5, 30))) for _ in range(lines)]


def _write_tokenizer(folder: Path, shape: LlamaShape) -> tuple[dict[str, int], int, list[int]]:
    """Train a byte-level BPE of up to ``shape.vocab`` tokens; returns the special tokens' ids,
    the vocabulary's size and the ids the model may generate (those whose bytes are printable
    ASCII)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=shape.vocab,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_training_text(shape.seed), trainer=trainer)
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHAT_TEMPLATE,
        "bos_token": "<|endoftext|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "add_bos_token": False,
        "model_max_length": shape.positions,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    assert None not in ids.values(), ids
    to_byte = {char: b for b, char in byte_to_unicode().items()}
    generable = [
        i
        for token, i in tok.get_vocab().items()
        if token not in ids and all(0x20 <= to_byte.get(c, 0) <= 0x7E for c in token)
    ]
    special = {t: int(i) for t, i in ids.items() if i is not None}
    return special, tok.get_vocab_size(), sorted(generable)


def _write_config(folder: Path, shape: LlamaShape, special_ids: dict[str, int], vocab: int) -> None:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.hidden // shape.heads,
        "hidden_act": "silu",
        "max_position_embeddings": shape.positions,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": vocab,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": special_ids["<|endoftext|>"],
        "eos_token_id": special_ids["<|im_end|>"],
        "pad_token_id": special_ids["<|endoftext|>"],
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1) + "\n")


def _write_weights(path: Path, shape: LlamaShape, vocab: int, generable: list[int]) -> None:
    """Random bf16 Llama weights in the safetensors format (numpy only).

    The output projection's rows are zero but for the ``generable`` tokens', which are large: the
    model never picks a control token or a lone non-ASCII byte, whose text would be empty (a
    stream chunk with no text, so a client would see the first token one step late).
    """
    import numpy as np

    rng = np.random.default_rng(shape.seed)
    h, ff, v = shape.hidden, shape.intermediate, vocab
    kv = shape.kv_heads * (h // shape.heads)
    tensors: dict[str, np.ndarray] = {"model.embed_tokens.weight": rng.standard_normal((v, h))}
    for i in range(shape.layers):
        p = f"model.layers.{i}"
        tensors[f"{p}.input_layernorm.weight"] = np.ones(h)
        tensors[f"{p}.post_attention_layernorm.weight"] = np.ones(h)
        for name, rows, cols in (("q_proj", h, h), ("k_proj", kv, h), ("v_proj", kv, h),
                                 ("o_proj", h, h)):  # fmt: skip
            tensors[f"{p}.self_attn.{name}.weight"] = rng.standard_normal((rows, cols)) * cols**-0.5
        for name, rows, cols in (("gate_proj", ff, h), ("up_proj", ff, h), ("down_proj", h, ff)):
            tensors[f"{p}.mlp.{name}.weight"] = rng.standard_normal((rows, cols)) * cols**-0.5
    tensors["model.norm.weight"] = np.ones(h)
    lm_head = np.zeros((v, h))
    lm_head[generable] = rng.standard_normal((len(generable), h)) * 1.5
    tensors["lm_head.weight"] = lm_head

    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs = []
    offset = 0
    for name, array in tensors.items():
        # bf16 = the upper half of a float32 (truncated)
        blob = (array.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(blob)]}  # fmt: skip
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the format pads the header to 8 bytes
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(head)))
        out.write(head)
        for blob in blobs:
            out.write(blob)
