"""The simulator's device profile: the step fit, the device given by hand, prompts counted by an
engine's own tokenizer (the twin of a real vLLM is judged in tests/test_vllm_regimes.py)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from llamacpp.model import CHAT_TEMPLATE, SPECIAL_TOKENS

from locust_llm.errors import InputError
from locust_llm.roofline.floors import get_model
from locust_llm.sim.config import config_from_mapping, load_toml
from locust_llm.sim.device_profile import StepSample, fit_steps, profile_settings, to_toml
from locust_llm.sim.engine import Engine
from locust_llm.sim.prompt_tokens import EngineTokens
from locust_llm.sim.testing import running_sim, stream_chat

pytestmark = pytest.mark.quick


MODEL = "llama-3.1-8b"


def _steps(
    overhead: float,
    per_seq: float,
    flops_per_s: float,
    bytes_per_s: float,
    prefill: float = 0.0,
) -> list[StepSample]:
    """Steps priced by the simulator's own physics: decode batches, prompts alone, a stage's
    mean step (4 decoding, a 64-token prompt every 16 steps), a decode batch at a long context
    (its KV read tells the bandwidth from the fixed overhead)."""
    model = get_model(MODEL)
    shapes = [StepSample(1.0, decode_seqs=b, decode_context=300) for b in (1, 3.5, 8)]
    shapes += [StepSample(1.0, prompt_tokens=p) for p in (512, 2048)]
    shapes.append(StepSample(1.0, 4, 300, prompt_tokens=4.0, prompt_chunk=64, prefill_seqs=1 / 16))
    shapes.append(StepSample(1.0, decode_seqs=8, decode_context=8000))
    return [
        replace(
            s,
            seconds=overhead
            + per_seq * s.sequences
            + prefill * s.prefill_share
            + max(s.flops(model) / flops_per_s, s.bytes(model) / bytes_per_s),
        )
        for s in shapes
    ]


def test_the_fit_recovers_the_constants_its_steps_were_priced_with() -> None:
    fit = fit_steps(get_model(MODEL), _steps(0.003, 0.0002, 50e12, 900e9))
    assert fit.overhead_s == pytest.approx(0.003, rel=1e-6)
    assert fit.per_seq_s == pytest.approx(0.0002, rel=1e-6)
    assert fit.prefill_s == pytest.approx(0.0, abs=1e-9)
    assert fit.flops_per_s == pytest.approx(50e12, rel=1e-6)
    assert fit.bytes_per_s == pytest.approx(900e9, rel=1e-6)
    assert fit.bound[:5] == ("memory", "memory", "memory", "compute", "compute")
    assert fit.worst_error() < 1e-9


def test_the_fit_recovers_a_prefill_steps_own_cost() -> None:
    """A step with prompt work costing 10 ms beyond its compute (vLLM's CPU build's shape) is
    fitted as the prefill term, not spread over the overhead and the bandwidth."""
    fit = fit_steps(get_model(MODEL), _steps(0.003, 0.0002, 50e12, 900e9, prefill=0.01))
    assert fit.prefill_s == pytest.approx(0.01, rel=1e-6)
    assert fit.overhead_s == pytest.approx(0.003, rel=1e-6)
    assert fit.per_seq_s == pytest.approx(0.0002, rel=1e-6)
    assert fit.flops_per_s == pytest.approx(50e12, rel=1e-6)
    assert fit.bytes_per_s == pytest.approx(900e9, rel=1e-6)
    assert fit.worst_error() < 1e-9


def test_steps_that_cannot_tell_the_terms_apart_are_still_priced_as_measured() -> None:
    """A CPU twin's calibration: decode steps at one context and prompts alone (the fixed
    overhead, the prefill term and the bandwidth are not all determined): the least-norm fit
    still prices each of its steps as measured, every term at least 0."""
    samples = _steps(0.003, 0.0002, 50e12, 900e9, prefill=0.01)
    fit = fit_steps(get_model(MODEL), [samples[i] for i in (0, 2, 3, 4)])
    assert fit.worst_error() < 1e-6
    assert min(fit.overhead_s, fit.per_seq_s, fit.prefill_s) >= 0
    assert fit.flops_per_s == pytest.approx(50e12, rel=1e-6)


#: The suite's tiny Llama (tests/vllm/model.py) and the calibration steps one run of vLLM's CPU
#: build measured on it (tests/vllm/twin.py; 2026-12-02): decode at 1 and 4 users, prompts of 77
#: and 269 tokens alone.
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 768,
    "intermediate_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 12,
    "num_key_value_heads": 4, "head_dim": 64, "max_position_embeddings": 4096,
    "vocab_size": 1024, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}  # fmt: skip
CPU_CALIBRATION = [
    StepSample(0.021073, 1.0, 45.0, prompt_chunk=29.0, prefill_seqs=0.0),
    StepSample(0.021674, 4.0, 45.0, 3.741935, 29.0, prefill_seqs=0.129032),
    StepSample(0.037802, prompt_tokens=77.0),
    StepSample(0.072140, prompt_tokens=269.0),
]


def test_a_fit_whose_rounds_alternate_keeps_the_nearest_solution(tmp_path) -> None:
    """On these steps the rounds alternate between two patterns (the 4-user step bound by
    compute, then by memory): the fit keeps the solution that prices the steps nearest their
    measured times under the max (the last round's missed the 4-user step by 18%)."""
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    fit = fit_steps(get_model(str(tmp_path / "config.json")), CPU_CALIBRATION)
    assert fit.worst_error() < 0.02
    assert min(fit.overhead_s, fit.per_seq_s, fit.prefill_s) >= 0


def test_the_engine_charges_the_prefill_term_once_a_step_with_prompt_work() -> None:
    """Two prompts admitted into one step cost one prefill term; the decode steps none."""

    def steps(prefill: float) -> list[float]:
        config = config_from_mapping(
            {"model": MODEL, "max_num_seqs": 4, "step_overhead_prefill_s": prefill}
        )
        engine = Engine(config)
        engine.add(300, 3)
        engine.add(200, 3)
        return [step.duration_s for step in engine.run_until_idle()]

    base, charged = steps(0.0), steps(0.01)
    assert len(base) == len(charged) == 3
    assert charged[0] - base[0] == pytest.approx(0.01, rel=1e-9)
    assert charged[1:] == pytest.approx(base[1:], rel=1e-12)


def test_a_negative_term_is_dropped_not_kept() -> None:
    # steps that get cheaper per sequence: no per-sequence cost, the rest refitted
    samples = _steps(0.003, 0.0, 50e12, 900e9)
    samples[2] = replace(samples[2], seconds=samples[2].seconds * 0.9)
    fit = fit_steps(get_model(MODEL), samples)
    assert fit.per_seq_s >= 0 and fit.overhead_s >= 0 and fit.flops_per_s > 0


def test_the_fit_refuses_too_few_or_empty_steps() -> None:
    with pytest.raises(InputError, match="at least 4"):
        fit_steps(get_model(MODEL), _steps(0.003, 0.0, 50e12, 900e9)[:3])
    with pytest.raises(InputError, match="seconds > 0"):
        fit_steps(get_model(MODEL), [StepSample(0.0, 1, 10)] * 4)


def test_a_profile_round_trips_through_toml_into_an_engine_priced_by_it(tmp_path) -> None:
    fit = fit_steps(get_model(MODEL), _steps(0.003, 0.0002, 50e12, 900e9))
    settings = profile_settings(fit, MODEL, {"max_num_seqs": 4}, api_server_s=0.01)
    path = tmp_path / "twin.toml"
    path.write_text(to_toml(settings))
    engine = Engine(config_from_mapping(load_toml(path)))
    assert engine.gpu.peak_flops(16) == pytest.approx(50e12, rel=1e-5)
    assert engine.gpu.memory_bandwidth_bytes_s == pytest.approx(900e9, rel=1e-5)
    engine.add(300, 2)
    steps = engine.run_until_idle()
    decode = StepSample(0.0, decode_seqs=1, decode_context=300)
    model = get_model(MODEL)
    expected = 0.003 + 0.0002 + max(decode.flops(model) / 50e12, decode.bytes(model) / 900e9)
    assert steps[-1].duration_s == pytest.approx(expected, rel=1e-4)


def test_a_device_given_by_hand_needs_all_three_figures() -> None:
    with pytest.raises(InputError, match="--memory missing"):
        config_from_mapping({"bandwidth": "40GB/s", "flops": "1TFLOPS"})
    with pytest.raises(InputError, match="--flops"):
        config_from_mapping({"bandwidth": "40GB/s", "flops": "fast", "memory": "8GiB"})
    config = config_from_mapping({"bandwidth": "40GB/s", "flops": "1TFLOPS", "memory": "8GiB"})
    assert config.device().memory_bandwidth_bytes_s == 40e9 and not math.isinf(
        config.device().memory_bytes
    )


def _tokenizer_dir(tmp_path):
    """A word-level tokenizer with the ChatML tokens and template (tokenizers builds it)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["hello", "there", "user", "assistant", "\\n"]
    vocab = {w: i for i, w in enumerate([*SPECIAL_TOKENS, *words, "[UNK]"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    tok.save(str(tmp_path / "tokenizer.json"))
    config = {"chat_template": CHAT_TEMPLATE, "eos_token": SPECIAL_TOKENS[-1]}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp_path


def test_prompts_are_counted_by_the_engines_tokenizer_and_template(tmp_path) -> None:
    folder = _tokenizer_dir(tmp_path)
    tokens = EngineTokens(str(folder))
    messages = [{"role": "user", "content": "hello there"}]
    rendered = tokens.template.render(messages)
    assert tokens.ids(messages, None) == tokens.tokenizer.encode(rendered)
    with running_sim(tokenizer=str(folder)) as url:
        usage = stream_chat(url, "hello there", max_tokens=2)
    assert usage["prompt_tokens"] == len(tokens.tokenizer.encode(rendered))
