"""The roofline: model and GPU presets, model loaders, devices and the physics of the floors.

``floors`` (ModelSpec, GpuSpec, presets, loaders, step cost, floors), ``devices`` (the device a
run names: a preset, ``cpu`` or figures by hand), ``cpu_device`` (a CPU measured as a device),
``hf_cache`` (a model id -> its config.json in the local Hugging Face cache) and ``cli``
(``locust-llm roofline``).

``from locust_llm.roofline import X`` for a name of ``floors`` still works (deprecated).
"""

from typing import Any


def __getattr__(name: str) -> Any:
    from locust_llm._compat import forward

    return forward(__name__, name)
