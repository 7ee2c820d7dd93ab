"""Prompt token counts with the model's chat template, judged by a real llama-server's usage.

The tiny model's tokenizer.json and tokenizer_config.json (ChatML) sit beside each other, as in a
Hugging Face model folder; ``load_dataset(..., tokenizer_path=...)`` finds the template there and
each prompt's ``input_tokens_estimate`` must equal the ``usage.prompt_tokens`` llama-server
reports for the same messages. Without the template the count is short by exactly the
template's own tokens. The template options' bad inputs give one-line errors.
"""

from __future__ import annotations

import json
import random
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from llamacpp.model import CHAT_TEMPLATE, TinyModel, write_tiny_model
from llamacpp.server import LlamaServer, start_llama_server

from locust_llm.errors import InputError
from locust_llm.workloads.datasets import Prompt, load_dataset

pytestmark = pytest.mark.slow

#: "<|im_start|>user\n" + "<|im_end|>\n<|im_start|>assistant\n" in the tiny vocabulary
#: (im_start, u, s, er, \n | im_end, \n, im_start, a, s, s, i, s, t, a, n, t, \n).
TEMPLATE_TOKENS = 18


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> TinyModel:
    return write_tiny_model(tmp_path_factory.mktemp("model"), n_embd=64, n_layer=1, n_head=4)


@pytest.fixture(scope="module")
def server(model: TinyModel, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    with start_llama_server(model.gguf, tmp_path_factory.mktemp("server"), slots=1) as server:
        yield server


def _server_prompt_tokens(server: LlamaServer, prompt: Prompt) -> int:
    body = json.dumps({"model": "m", "messages": prompt.messages, "max_tokens": 1}).encode()
    request = urllib.request.Request(
        server.url + "/v1/chat/completions", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return int(json.loads(response.read())["usage"]["prompt_tokens"])


@pytest.mark.parametrize("dataset", ["random", "openqa"])
def test_counts_with_the_template_beside_the_tokenizer_equal_the_servers(
    dataset: str, model: TinyModel, server: LlamaServer
) -> None:
    source = load_dataset(
        dataset, input_len="30" if dataset == "random" else None,
        tokenizer_path=str(model.tokenizer_dir),
    )  # fmt: skip
    rng = random.Random(3)
    prompts = [source.next_request(rng) for _ in range(6)]
    ours = [p.input_tokens_estimate for p in prompts]
    assert ours == [_server_prompt_tokens(server, p) for p in prompts]


def test_without_the_template_the_count_is_short_by_the_templates_tokens(
    model: TinyModel, server: LlamaServer
) -> None:
    tokenizer = str(model.tokenizer_dir / "tokenizer.json")
    plain = load_dataset("random", input_len="25", tokenizer_path=tokenizer, chat_template="none")
    prompt = plain.next_request(random.Random(1))
    assert prompt.input_tokens_estimate == 25
    assert _server_prompt_tokens(server, prompt) == 25 + TEMPLATE_TOKENS


def test_an_explicit_jinja_template_is_used(
    model: TinyModel, server: LlamaServer, tmp_path: Path
) -> None:
    jinja = tmp_path / "chatml.jinja"
    jinja.write_text(CHAT_TEMPLATE)
    tokenizer = tmp_path / "tok"
    tokenizer.mkdir()
    (tokenizer / "tokenizer.json").write_bytes(
        (model.tokenizer_dir / "tokenizer.json").read_bytes()
    )
    source = load_dataset("openqa", tokenizer_path=str(tokenizer), chat_template=str(jinja))
    prompt = source.next_request(random.Random(2))
    assert prompt.input_tokens_estimate == _server_prompt_tokens(server, prompt)
    no_template = load_dataset("openqa", tokenizer_path=str(tokenizer))  # none beside it
    assert no_template.next_request(random.Random(2)).input_tokens_estimate == (
        prompt.input_tokens_estimate - TEMPLATE_TOKENS
    )


@pytest.mark.parametrize(
    ("config", "template_option", "message"),
    [
        (None, "missing.jinja", "--llm-chat-template missing.jinja: no such file"),
        ({"bos_token": "<s>"}, "CONFIG", "it has no chat_template"),
        ({"chat_template": [{"name": "tool_use", "template": "x"}]}, "CONFIG",
         'one named "default"'),
        ({"chat_template": "{% if %}"}, "", "not valid Jinja"),
        ({"chat_template": "{{ raise_exception('roles must alternate') }}"}, "",
         "roles must alternate"),
    ],
)  # fmt: skip
def test_bad_templates_give_one_line_errors(
    model: TinyModel, tmp_path: Path, config: dict | None, template_option: str, message: str
) -> None:
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes((model.tokenizer_dir / "tokenizer.json").read_bytes())
    if config is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    option = (
        str(folder / "tokenizer_config.json") if template_option == "CONFIG" else template_option
    )
    with pytest.raises(InputError) as caught:
        source = load_dataset("openqa", tokenizer_path=str(folder), chat_template=option or None)
        source.next_request(random.Random(0))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_named_default_template_is_chosen(model: TinyModel, tmp_path: Path) -> None:
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes((model.tokenizer_dir / "tokenizer.json").read_bytes())
    templates = [
        {"name": "tool_use", "template": "x"},
        {"name": "default", "template": CHAT_TEMPLATE},
    ]
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": templates}))
    with_named = load_dataset("random", input_len="10", tokenizer_path=str(folder))
    assert with_named.next_request(random.Random(0)).input_tokens_estimate == 10 + TEMPLATE_TOKENS


def test_a_template_needs_a_tokenizer(tmp_path: Path) -> None:
    jinja = tmp_path / "t.jinja"
    jinja.write_text(CHAT_TEMPLATE)
    with pytest.raises(InputError, match="needs the model's tokenizer too; give --llm-tokenizer"):
        load_dataset("openqa", chat_template=str(jinja))
