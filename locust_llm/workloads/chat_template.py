"""A model's chat template: the text a chat server really tokenizes for a list of messages.

A chat server does not tokenize the message text alone: it renders the model's Jinja chat template
(role markers, separators, the assistant turn it is about to write) and tokenizes that. Counting
prompt tokens without it undercounts (192 vs the server's 201 in issue 16). :func:`find_template`
finds the template the way Hugging Face tools do, and :class:`ChatTemplate` renders it with the
same Jinja settings (``trim_blocks``, ``lstrip_blocks``, a sandbox, ``raise_exception``) and
``add_generation_prompt=True``.

Where a template comes from, first match wins:

1. ``--llm-chat-template PATH``: a ``.jinja`` file, or a ``tokenizer_config.json`` holding one;
   ``none`` turns templating off (count the message text only).
2. Beside ``--llm-tokenizer``: ``chat_template.jinja``, else ``tokenizer_config.json``'s
   ``chat_template`` (a string, or a list of named templates: the one named ``default``).

No template found is not an error: counts then cover the message text only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from locust_llm.errors import InputError

CONFIG_FILE = "tokenizer_config.json"
JINJA_FILE = "chat_template.jinja"


def _special(config: dict[str, Any], name: str) -> str:
    value = config.get(name)
    if isinstance(value, dict):  # {"content": "<s>", ...} in older configs
        value = value.get("content")
    return value if isinstance(value, str) else ""


def _template_in_config(config: dict[str, Any], where: str) -> str | None:
    value = config.get("chat_template")
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        chosen = named.get("default")
        if isinstance(chosen, str):
            return chosen
    raise InputError(
        f"{where}: chat_template must be a string or a list of "
        '{"name": ..., "template": ...} with one named "default"'
    )


def _read_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object")
    return data


class ChatTemplate:
    """A Jinja chat template plus the special tokens it may refer to."""

    def __init__(
        self, source: str, *, where: str, bos_token: str = "", eos_token: str = ""
    ) -> None:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise InputError(f"chat template {where}: {message}")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        try:
            self._template = env.from_string(source)
        except TemplateError as exc:
            raise InputError(f"chat template {where}: not valid Jinja ({exc})") from None
        self.where = where
        self.bos_token = bos_token
        self.eos_token = eos_token

    def render(self, messages: Sequence[dict[str, str]]) -> str:
        """The text the server tokenizes for ``messages`` (with the assistant turn opened)."""
        from jinja2 import TemplateError

        try:
            return str(
                self._template.render(
                    messages=list(messages),
                    add_generation_prompt=True,
                    bos_token=self.bos_token,
                    eos_token=self.eos_token,
                )
            )
        except TemplateError as exc:
            raise InputError(f"chat template {self.where}: {exc}") from None


def _from_config(path: Path) -> ChatTemplate | None:
    config = _read_config(path)
    source = _template_in_config(config, str(path))
    if source is None:
        return None
    bos, eos = _special(config, "bos_token"), _special(config, "eos_token")
    return ChatTemplate(source, where=str(path), bos_token=bos, eos_token=eos)


def _from_jinja(path: Path, config: Path | None) -> ChatTemplate:
    try:
        source = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"--llm-chat-template {path}: cannot read ({exc.strerror})") from None
    settings = _read_config(config) if config is not None and config.is_file() else {}
    return ChatTemplate(
        source,
        where=str(path),
        bos_token=_special(settings, "bos_token"),
        eos_token=_special(settings, "eos_token"),
    )


def find_template(option: str | None, tokenizer_path: str | None) -> ChatTemplate | None:
    """The chat template named by ``--llm-chat-template``, else the one beside the tokenizer."""
    folder = None
    if tokenizer_path:
        folder = Path(tokenizer_path)
        folder = folder if folder.is_dir() else folder.parent
    beside_config = folder / CONFIG_FILE if folder is not None else None
    if option:
        if option.strip().lower() == "none":
            return None
        path = Path(option)
        if not path.is_file():
            raise InputError(
                f"--llm-chat-template {option}: no such file; expected a .jinja template, a "
                f"{CONFIG_FILE} holding one, or none"
            )
        if path.suffix == ".json":
            found = _from_config(path)
            if found is None:
                raise InputError(f"--llm-chat-template {option}: it has no chat_template")
            return found
        return _from_jinja(path, beside_config)
    if folder is None:
        return None
    if (folder / JINJA_FILE).is_file():
        return _from_jinja(folder / JINJA_FILE, beside_config)
    if beside_config is not None and beside_config.is_file():
        return _from_config(beside_config)
    return None
