"""The simulator's settings: one frozen :class:`SimConfig`, its TOML loader and validation.

Every field has a documented default and a unit in its name where it has one. The CLI builds a
config from a TOML file (``--config``, keys are the field names, dashes or underscores) with
the command-line flags on top. Bad values raise :class:`~locust_llm.errors.InputError` naming
the field and what was expected.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from locust_llm.errors import InputError
from locust_llm.roofline.floors import (
    KV_BLOCK_TOKENS,
    MEMORY_RESERVE_BYTES,
    GpuSpec,
    custom_gpu,
    get_gpu,
    get_interconnect,
    parse_quantity,
)
from locust_llm.sim.engine_profiles import DEFAULT_ENGINE, PROFILE_FIELDS, get_profile
from locust_llm.workloads.distributions import parse_distribution

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10 only
    import tomli as tomllib


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """How the simulated server behaves. Keyword-only; every field has a default."""

    model: str = "mistral-7b"  # roofline preset key or config.json / .gguf path
    gpu: str = "rtx4090"  # roofline GPU preset key (one GPU; --tp of them)
    #: a device given by hand instead of ``gpu`` (all three, as ``locust-llm roofline`` takes
    #: them: ``40GB/s``, ``1.2TFLOPS``, ``64GiB``): a CPU engine's profile, a GPU with no preset
    bandwidth: str = ""
    flops: str = ""
    memory: str = ""
    tp: int = 1  # tensor-parallel degree: GPUs the model's weights and KV are split over
    interconnect: str = "nvlink"  # link preset of the tensor-parallel all-reduces
    pp: int = 1  # pipeline-parallel degree: stages the layers are split over (tp x pp GPUs)
    pp_interconnect: str = ""  # link between pipeline stages ("" = ``interconnect``)
    served_model_name: str = ""  # name clients send/see; "" = the model name
    host: str = "127.0.0.1"
    port: int = 8000
    # engine limits (vLLM's names)
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = KV_BLOCK_TOKENS  # tokens per KV block (16)
    max_model_len: int = 32768  # prompt + output tokens a request may ask for
    gpu_memory_utilization: float = 0.9
    num_gpu_blocks_override: int | None = None  # a fixed KV budget in blocks (vLLM's flag)
    memory_reserve_bytes: float = MEMORY_RESERVE_BYTES  # 1 GiB: CUDA context + activations
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True  # vLLM v1's default; --no-enable-prefix-caching
    # physics
    bandwidth_efficiency: float = 0.85
    compute_efficiency: float = 0.7  # calibrated: bench/results/calibration.md
    #: the engine whose host-side constants (the six fields below) apply where they are not
    #: given: a name of :data:`locust_llm.sim.engine_profiles.PROFILES`
    engine: str = DEFAULT_ENGINE
    # host-side constants; NaN (0 for the step count) = the engine profile's value
    step_overhead_s: float = math.nan  # fixed per-step cost (scheduling, kernel launches)
    #: host time per sequence in the step (scheduling it, preparing its inputs, sampling and
    #: emitting its token), on the GPU's critical path between steps
    step_overhead_per_seq_s: float = math.nan
    #: fixed cost of a step that computes prompt tokens (one or more prompt chunks), beyond
    #: ``step_overhead_s``: an engine's prefill path (its attention inputs and kernels for
    #: chunks of many tokens). No engine profile sets it (0); a device profile fits it where the
    #: engine's prompt steps cost more than their tokens' compute and the decode steps' overhead
    #: (:mod:`locust_llm.sim.device_profile`)
    step_overhead_prefill_s: float = 0.0
    #: decode steps run per scheduling decision (vLLM V0's --num-scheduler-steps)
    decode_steps_per_schedule: int = 0
    api_server_s: float = math.nan  # per request, before the engine sees it
    tokenize_s_per_token: float = math.nan  # per prompt token, before the engine sees it
    detokenize_s_per_token: float = math.nan  # per token, from its step's end to the socket
    tp_step_overhead_s: float = math.nan  # per step, for each tensor-parallel GPU beyond one
    zero_cost: bool = False  # every step takes step_overhead_s only (benchmarks the front)
    oom: bool = False  # out-of-KV fails requests with a CUDA OOM 500 instead of preempting
    # responses
    #: distribution of EOS-ended output lengths (:mod:`locust_llm.workloads.distributions`)
    output_len: str = "lognormal:256:0.5"
    tokens_per_chunk: int = 1  # tokens per streamed chunk (stream interval / speculation)
    reasoning_tokens: int = (
        0  # chat answers open with this many reasoning tokens (a reasoning model)
    )
    faults: tuple[str, ...] = ()  # "KIND:RATE[:ARG]" (see locust_llm.sim.faults)
    trace_path: str = ""  # JSON lines, one per request; "" = no trace
    step_trace_path: str = ""  # JSON lines, one per engine step; "" = none (costs nothing)
    listen_backlog: int = 4096  # pending connects the kernel queues (capped by somaxconn)
    seed: int = 0
    #: a local Hugging Face tokenizer (a folder with tokenizer.json, and its chat template in
    #: tokenizer_config.json): prompts are counted, and their KV blocks hashed, by its tokens as
    #: the engine it stands for counts them; "" = the simulator's own estimate
    tokenizer: str = ""

    def __post_init__(self) -> None:
        profile = get_profile(self.engine)
        for name, value in profile.settings().items():
            mine = getattr(self, name)
            unset = mine == 0 if name == "decode_steps_per_schedule" else mine != mine  # NaN
            if unset:
                object.__setattr__(self, name, value)

    def front_s(self, prompt_tokens: int) -> float:
        """Time from a request's arrival to the engine seeing it: API server + tokenization."""
        return self.api_server_s + self.tokenize_s_per_token * prompt_tokens

    def device(self) -> GpuSpec:
        """The device: the one given by hand (``bandwidth``/``flops``/``memory``), else the
        ``gpu`` preset."""
        if self.bandwidth:
            spec = custom_gpu(self.bandwidth, self.flops, self.memory)
            return replace(spec, source="given by hand (--bandwidth, --flops, --memory)")
        return get_gpu(self.gpu)

    @property
    def model_name(self) -> str:
        """The name clients use (``served_model_name`` or the model argument)."""
        return self.served_model_name or self.model

    def validated(self) -> SimConfig:
        """Self, after checking every field; raises InputError naming the first bad one."""
        positive_ints = (
            "max_num_seqs",
            "max_num_batched_tokens",
            "block_size",
            "max_model_len",
            "tokens_per_chunk",
            "tp",
            "pp",
            "listen_backlog",
            "decode_steps_per_schedule",
        )
        for name in positive_ints:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InputError(f"{_flag(name)} must be an integer >= 1, got {value!r}")
        if not isinstance(self.reasoning_tokens, int) or self.reasoning_tokens < 0:
            raise InputError(
                f"--reasoning-tokens must be an integer >= 0, got {self.reasoning_tokens!r}"
            )
        if not 0 <= self.port <= 65535:
            raise InputError(f"--port must be 0..65535, got {self.port}")
        if self.num_gpu_blocks_override is not None and self.num_gpu_blocks_override < 1:
            raise InputError(
                f"--num-gpu-blocks-override must be >= 1, got {self.num_gpu_blocks_override}"
            )
        for name in ("gpu_memory_utilization", "bandwidth_efficiency", "compute_efficiency"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 < value <= 1):
                raise InputError(f"{_flag(name)} must be in (0, 1], got {value!r}")
        for name in (
            "step_overhead_s",
            "step_overhead_per_seq_s",
            "step_overhead_prefill_s",
            "memory_reserve_bytes",
            "api_server_s",
            "tokenize_s_per_token",
            "detokenize_s_per_token",
            "tp_step_overhead_s",
        ):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise InputError(f"{_flag(name)} must be a number >= 0, got {value!r}")
        parse_distribution(self.output_len, what="--output-len")
        hand = {"--bandwidth": self.bandwidth, "--flops": self.flops, "--memory": self.memory}
        given = [flag for flag, value in hand.items() if value]
        if given and len(given) < len(hand):
            missing = ", ".join(flag for flag in hand if flag not in given)
            raise InputError(f"a device given by hand needs --bandwidth, --flops and --memory "
                             f"({missing} missing)")  # fmt: skip
        kinds = ("bandwidth", "flops", "memory")
        for (flag, value), kind in zip(hand.items(), kinds, strict=True):
            if value:
                parse_quantity(value, kind, flag=flag)
        get_interconnect(self.interconnect)
        if self.pp_interconnect:
            get_interconnect(self.pp_interconnect)
        if self.pp > 1 and self.decode_steps_per_schedule > 1:
            raise InputError(
                f"--pp {self.pp} with {self.decode_steps_per_schedule} decode steps per schedule "
                "(the engine profile's or --decode-steps-per-schedule): the simulator runs "
                "pipeline stages with one step per schedule only"
            )
        return self

    @property
    def stage_link(self) -> str:
        """The link preset between pipeline stages."""
        return self.pp_interconnect or self.interconnect


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


_FIELDS = {f.name: f for f in fields(SimConfig)}


def config_from_mapping(values: Mapping[str, Any], *, base: SimConfig | None = None) -> SimConfig:
    """A config from ``values`` (field names, dashes allowed) over ``base`` (default: defaults)."""
    clean: dict[str, Any] = {}
    for key, value in values.items():
        name = key.replace("-", "_")
        if name not in _FIELDS:
            raise InputError(
                f"unknown simulator setting {key!r}; known: {', '.join(sorted(_FIELDS))}"
            )
        if name == "faults":
            value = tuple([value] if isinstance(value, str) else value)
        clean[name] = value
    if "engine" in clean:  # the new engine's constants, except those given here
        get_profile(clean["engine"])
        for name in PROFILE_FIELDS:
            if name not in clean:
                clean[name] = 0 if name == "decode_steps_per_schedule" else math.nan
    return replace(base or SimConfig(), **clean).validated()


def load_toml(path: str | Path) -> dict[str, Any]:
    """The settings in a TOML file: top level, or a ``[sim]`` table when there is one."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise InputError(f"--config: cannot read {path} ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"--config: {path} is not valid TOML ({exc})") from None
    table = data.get("sim", data)
    if not isinstance(table, dict):
        raise InputError(f"--config: {path}: [sim] must be a table")
    return table
