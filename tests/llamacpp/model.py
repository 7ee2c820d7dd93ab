"""A tiny random-weight llama model the conformance tests write themselves (no model hub, no torch).

:func:`write_tiny_model` writes, in about a second:

* ``tiny-llama.gguf``: llama architecture, 4 layers, 512-wide, 8 heads, f16 random weights, and a
  GPT-2 style byte-level BPE vocabulary: the 256 byte tokens, a few merges, and three control
  tokens (``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``), with a ChatML chat template in the
  metadata so ``/v1/chat/completions`` works.
* ``tokenizer.json`` + ``tokenizer_config.json``: the same vocabulary for the Hugging Face
  ``tokenizers`` package, and the same chat template, so locust-llm's ``--llm-tokenizer`` counts
  prompts exactly as the server does.

Every generated token decodes to valid UTF-8: the output projection rows of all tokens but the
printable ASCII ones (and the merges, which are ASCII) are zero, while the others are large, so
the model never picks a control token, a non-ASCII byte or EOS (a request always runs to its
``max_tokens``) under greedy or the server's default top-k/min-p sampling. Input may hold any
byte: every byte has a token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

#: ChatML, the template llama.cpp also recognizes without Jinja.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
#: A few merges (GPT-2 byte-level spelling: "Ġ" is the space byte), all ASCII when decoded.
MERGES = (("Ġ", "t"), ("Ġ", "a"), ("t", "h"), ("h", "e"), ("i", "n"), ("e", "r"), ("Ġt", "he"))


@dataclass(frozen=True, slots=True)
class TinyModel:
    """Paths of a written tiny model and its vocabulary size."""

    gguf: Path
    tokenizer_dir: Path
    n_vocab: int
    name: str = "tiny-llama"


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (byte-level BPE's alphabet)."""
    visible = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table = {b: chr(b) for b in visible}
    shifted = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shifted)
            shifted += 1
    return table


def vocabulary() -> tuple[list[str], list[int]]:
    """Token strings in id order and the ids the model may generate (printable ASCII)."""
    chars = byte_to_unicode()
    tokens = [chars[b] for b in range(256)]
    tokens += ["".join(pair) for pair in MERGES]
    generable = [b for b in range(256) if 0x20 <= b <= 0x7E]
    generable += list(range(256, 256 + len(MERGES)))
    tokens += list(SPECIAL_TOKENS)
    return tokens, generable


def write_tiny_model(
    folder: Path,
    *,
    seed: int = 0,
    context_tokens: int = 4096,
    n_embd: int = 512,
    n_layer: int = 4,
    n_head: int = 8,
) -> TinyModel:
    """Write the GGUF model and its Hugging Face tokenizer files into ``folder``.

    The default size (about 13 M parameters, f16, 27 MB) makes one decode step take a few
    milliseconds on one core, so the server, not the client, sets the pace of a load test.
    """
    import gguf
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    tokens, generable = vocabulary()
    n_vocab, n_ff = len(tokens), 3 * n_embd
    special_ids = {t: tokens.index(t) for t in SPECIAL_TOKENS}
    rng = np.random.default_rng(seed)

    def rand(*shape: int, scale: float) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(np.float16)

    path = folder / "tiny-llama.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_context_length(context_tokens)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    types = [gguf.TokenType.NORMAL] * (n_vocab - len(SPECIAL_TOKENS))
    writer.add_token_types([*types, *[gguf.TokenType.CONTROL] * len(SPECIAL_TOKENS)])
    writer.add_token_merges([f"{a} {b}" for a, b in MERGES])
    writer.add_bos_token_id(special_ids["<|endoftext|>"])
    writer.add_eos_token_id(special_ids["<|im_end|>"])
    writer.add_pad_token_id(special_ids["<|endoftext|>"])
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    # numpy shapes are ggml's ne reversed: (rows = outputs, columns = inputs)
    writer.add_tensor("token_embd.weight", rand(n_vocab, n_embd, scale=1.0))
    for i in range(n_layer):
        p = f"blk.{i}"
        writer.add_tensor(f"{p}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"{p}.{name}.weight", rand(n_embd, n_embd, scale=n_embd**-0.5))
        writer.add_tensor(f"{p}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"{p}.ffn_gate.weight", rand(n_ff, n_embd, scale=n_embd**-0.5))
        writer.add_tensor(f"{p}.ffn_up.weight", rand(n_ff, n_embd, scale=n_embd**-0.5))
        writer.add_tensor(f"{p}.ffn_down.weight", rand(n_embd, n_ff, scale=n_ff**-0.5))
    writer.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    output = np.zeros((n_vocab, n_embd), dtype=np.float16)
    output[generable] = rand(len(generable), n_embd, scale=1.5)
    writer.add_tensor("output.weight", output)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    _write_hf_tokenizer(folder, tokens, special_ids)
    return TinyModel(path, folder, n_vocab)


def _write_hf_tokenizer(folder: Path, tokens: list[str], special_ids: dict[str, int]) -> None:
    """tokenizer.json (byte-level BPE, GPT-2 pre-tokenizer) and tokenizer_config.json."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(tokens) if t not in special_ids}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=list(MERGES)))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special_ids])
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",  # what transformers' AutoTokenizer loads
        "chat_template": CHAT_TEMPLATE,
        "bos_token": "<|endoftext|>",
        "eos_token": "<|im_end|>",
        "add_bos_token": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
