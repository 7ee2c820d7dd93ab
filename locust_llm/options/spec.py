"""What one ``--llm-*`` option is: the :class:`Option` record every use of an option derives from.

An entry names the option once (``--llm-<name>``) and holds its default, help, kind, how its raw
value becomes its :class:`~locust_llm.options.config.ClientOptions` field (``read``), the check
of that field's value, whether it is a secret, and the flag of ``locust-llm run``/``demo`` that
stands for it. From it come the argparse/configargparse keyword arguments (the Locust flag and
its ``LOCUST_LLM_*`` environment variable), the config-file key, the reference page and the
pass-through of ``run``, and whether it is a field of the web UI's start form. The table of entries
is :data:`locust_llm.options.table.OPTIONS`.
Pure: no Locust.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from locust_llm.options import readers

#: text: a string; switch: on when given; float/int: a number; list: repeatable, one value a use
Kind = Literal["text", "switch", "float", "int", "list"]

#: raw parsed value (None: not given) and the flag -> the ClientOptions field's value
Reader = Callable[[str, Any], Any]
#: the flag and the field's value -> None, or an InputError naming the flag
Check = Callable[[str, Any], None]

_READERS: dict[str, Reader] = {
    "text": readers.text,
    "switch": readers.switch,
    "float": readers.number,
    "int": readers.whole,
    "list": readers.strings,
}
_ARGPARSE: dict[str, dict[str, Any]] = {
    "text": {},
    "switch": {"action": "store_true"},
    "float": {"type": float},
    "int": {"type": int},
    "list": {"action": "append"},
}


def env_var(name: str) -> str:
    """The environment variable of option ``--llm-<name>`` (``LOCUST_LLM_<NAME>``)."""
    return "LOCUST_LLM_" + name.upper().replace("-", "_")


@dataclass(frozen=True, slots=True, kw_only=True)
class Option:
    """One ``--llm-*`` option, declared once."""

    name: str  # the flag without --llm-
    default: Any
    help: str
    section: str
    kind: Kind = "text"
    field: str = ""  # the ClientOptions field ("" = the name, dashes as underscores)
    read: Reader | None = None  # raw value -> field value (None: the kind's reader)
    check: Check | None = None
    secret: bool = False  # a credential: out of repr, masked in logs, run.json and refusals
    choices: tuple[str, ...] = ()
    run_flag: str = ""  # the flag of `locust-llm run`/`demo` that stands for it (without --)
    class_attribute: bool = False  # an LLMUser class attribute of the field's name overrides it
    #: a field of Locust's web-UI start form ("Custom parameters"), applied to the test it starts
    web_ui: bool = False

    @property
    def flag(self) -> str:
        return f"--llm-{self.name}"

    @property
    def dest(self) -> str:
        """The attribute of the parsed namespace (``llm_<name>``)."""
        return "llm_" + self.name.replace("-", "_")

    @property
    def env_var(self) -> str:
        return env_var(self.name)

    @property
    def argparse_help(self) -> str:
        """The help as an argparse parser takes it: argparse %-formats every help string, so a
        literal ``%`` (``errors=1%``) is doubled (else ``--help`` fails with ValueError)."""
        return self.help.replace("%", "%%")

    @property
    def config_key(self) -> str:
        """The key of a Locust config file (``llm-<name> = value``)."""
        return f"llm-{self.name}"

    @property
    def field_name(self) -> str:
        return self.field or self.name.replace("-", "_")

    @property
    def shown_default(self) -> str:
        """The default as help and reference pages show it ("off" for a switch, "-" for none)."""
        if not self.takes_value:
            return "off"
        if self.default in ("", None):
            return "-"
        return str(self.default)

    @property
    def takes_value(self) -> bool:
        return self.kind != "switch"

    @property
    def repeatable(self) -> bool:
        return self.kind == "list"

    def argparse_kwargs(self) -> dict[str, Any]:
        """``add_argument`` keyword arguments but the flag, help and environment variable."""
        kwargs = dict(_ARGPARSE[self.kind], default=self.default)
        if self.choices:
            kwargs["choices"] = list(self.choices)
        return kwargs

    def value_of(self, namespace: Any) -> Any:
        """This option's ClientOptions field value, read from a parsed namespace (its default
        where the namespace lacks it), not yet checked."""
        raw = getattr(namespace, self.dest, None)
        if raw is None:
            raw = self.default
        return (self.read or _READERS[self.kind])(self.flag, raw)

    def to_args(self, value: Any) -> list[str]:
        """A parsed value as command-line arguments ([] for a switch that is off)."""
        if self.kind == "switch":
            return [self.flag] if value else []
        if self.kind == "list":
            return [a for item in value or () for a in (self.flag, str(item))]
        return [self.flag, str(value)]
