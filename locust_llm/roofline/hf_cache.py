"""Find a model's ``config.json`` in the local Hugging Face cache; nothing is ever downloaded.

The cache is the one ``huggingface_hub`` fills: ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``. A model ``org/name``
lives in ``models--org--name/``; ``refs/main`` holds the commit of the ``main`` revision and
``snapshots/<commit>/`` the files. Without a ``refs/main`` the newest snapshot that has the
file is used.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

#: what a Hugging Face model id looks like: ``org/name`` (letters, digits, ``-_.``)
_MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def looks_like_model_id(text: str) -> bool:
    """Whether ``text`` has the shape of a Hugging Face model id (``org/name``)."""
    return bool(_MODEL_ID.match(text))


def cache_dir() -> Path:
    """The Hugging Face hub cache folder this environment points at (it may not exist)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def cached_file(model_id: str, filename: str = "config.json") -> Path | None:
    """The cached ``filename`` of ``model_id`` (revision ``main``), or None when not cached."""
    repo = cache_dir() / ("models--" + model_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    ref = repo / "refs" / "main"
    if ref.is_file():
        path = snapshots / ref.read_text().strip() / filename
        return path if path.is_file() else None
    candidates = [p for p in snapshots.glob(f"*/{filename}") if p.is_file()]
    return max(candidates, key=lambda p: p.stat().st_mtime) if candidates else None
