"""The peer bench's setup as docs/metrics.md gives it: the peers' paths come from the
environment (or a bench's ``--peers``) only, and the offline tokenizer recipe, run exactly as
written, gives a tokenizer with the chat template EvalScope 1.14.1 applies to every prompt."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from bench.peers import aiperf, evalscope
from bench.peers.common import (
    PEERS_ENV,
    TOKENIZER_ENV,
    VENV_ENV,
    Load,
    PeerMissing,
    peer_tokenizer,
    peer_venv,
    prompt_text,
    use_peers,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_peer_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in (PEERS_ENV, TOKENIZER_ENV, *VENV_ENV.values()):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_without_a_configured_path_a_peer_is_not_run_and_says_why(
    no_peer_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(PeerMissing, match="LOCUST_LLM_EVALSCOPE_VENV"):
        peer_venv("evalscope")
    load = Load(concurrency=1, requests=1)
    for run, name in ((evalscope.run, "evalscope"), (aiperf.run, "aiperf")):
        result = run("http://127.0.0.1:9", load, tmp_path / name)
        assert result.records == [] and result.note.startswith(f"not run: {name}: set ")
        assert PEERS_ENV in result.note


def test_the_peers_directory_and_the_per_peer_overrides(
    no_peer_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    use_peers(tmp_path)  # what a bench's --peers DIR does
    assert peer_venv("evalscope") == tmp_path.resolve() / "evalscope"
    assert peer_tokenizer() == tmp_path.resolve() / "tokenizer"
    no_peer_env.setenv(VENV_ENV["aiperf"], str(tmp_path / "elsewhere"))
    no_peer_env.setenv(TOKENIZER_ENV, str(tmp_path / "tok"))
    assert peer_venv("aiperf") == tmp_path / "elsewhere"
    assert peer_tokenizer() == tmp_path / "tok"
    assert peer_venv("evalscope") == tmp_path.resolve() / "evalscope"


def test_the_tokenizer_recipe_in_the_docs_runs_as_written() -> None:
    from tokenizers import Tokenizer

    doc = (ROOT / "docs" / "metrics.md").read_text()
    recipe = ".venv/bin/python -m bench.peers.tokenizer"
    (command,) = [line.strip() for line in doc.splitlines() if line.strip().startswith(recipe)]
    out = subprocess.run(shlex.split(command), cwd=ROOT, capture_output=True, text=True,
                         timeout=120, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    where = Path(out.stdout.strip())
    assert where == Path(shlex.split(command)[-1])
    tok = Tokenizer.from_file(str(where / "tokenizer.json"))
    config = json.loads((where / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    # the chat template as transformers renders it (a sandboxed jinja2 environment)
    template = ImmutableSandboxedEnvironment().from_string(config["chat_template"])
    prompt = prompt_text(3)
    text = template.render(messages=[{"role": "user", "content": prompt}],
                           add_generation_prompt=True)  # fmt: skip
    assert text == f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.encode(text).ids
    unk = tok.token_to_id(config["unk_token"])
    assert unk not in ids and len(ids) == len(prompt.split()) + 5  # 3 markers + 2 roles
    assert tok.token_to_id(config["eos_token"]) is not None
