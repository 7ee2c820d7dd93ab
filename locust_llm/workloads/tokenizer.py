"""A local Hugging Face tokenizer (``--llm-tokenizer``): exact token counts of prompt text.

Pure (the optional ``tokenizers`` package, no network); a missing package, file or a file that is
not a ``tokenizer.json`` is an :class:`~locust_llm.errors.InputError` naming the path.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from locust_llm.errors import InputError


class HfTokenizer:
    """A local Hugging Face ``tokenizer.json`` (or a folder holding one), via ``tokenizers``."""

    def __init__(self, path: str | Path) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise InputError(
                f"--llm-tokenizer {path}: the 'tokenizers' package is not installed; "
                "run: pip install tokenizers"
            ) from None
        file = Path(path)
        if file.is_dir():
            file = file / "tokenizer.json"
        if not file.is_file():
            raise InputError(
                f"--llm-tokenizer {path}: no such file; expected a tokenizer.json or a folder "
                "holding one (a local Hugging Face model folder)"
            )
        try:
            self._tok = Tokenizer.from_file(str(file))
        except Exception as exc:  # the Rust side raises plain Exceptions
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise InputError(f"--llm-tokenizer {file}: not a tokenizer.json ({first})") from None

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens (no BOS)."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=True)

    def count(self, text: str) -> int:
        """Exact token count of ``text`` (no special tokens)."""
        return len(self.encode(text))
