"""The option spec: each ``--llm-*`` option declared once, every use derived from its entry.

In-process: the Locust flag with its environment variable, the config key on the reference page,
the typed ClientOptions field (a field and its entry drifting apart fails here), the checks, the
one output-cap parser, and no import circle among the option modules.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import configargparse
import pytest
from conftest import ROOT

from locust_llm.client import redact
from locust_llm.errors import InputError
from locust_llm.launch.options_cli import render_markdown
from locust_llm.options import config, lengths, settings
from locust_llm.options import table as options

#: a value each kind reads from its environment variable, and what the field then holds
ENV_SAMPLE = {"text": "x", "switch": "true", "float": "2.5", "int": "17", "list": "[A: 1, B: 2]"}


def _parser() -> configargparse.ArgumentParser:
    parser = configargparse.ArgumentParser()
    options.add_arguments(parser)
    return parser


def test_every_entry_is_a_flag_with_its_env_var_and_a_config_key_on_the_page() -> None:
    actions = {a.option_strings[0]: a for a in _parser()._actions if a.option_strings}
    page = (ROOT / "docs" / "options.md").read_text()
    assert page == render_markdown()
    for option in options.OPTIONS:
        action = actions[option.flag]
        assert action.dest == option.dest and action.help == option.argparse_help
        assert getattr(action, "env_var", None) == option.env_var
        assert f"`{option.env_var}` / `{option.config_key}`" in page, option.flag
    assert len({o.name for o in options.OPTIONS}) == len(options.OPTIONS)  # declared once


@pytest.mark.parametrize("option", options.OPTIONS, ids=lambda o: o.name)
def test_every_env_var_sets_its_option(option: options.Option) -> None:
    raw = ENV_SAMPLE[option.kind]
    if option.choices:
        raw = option.choices[-1]
    parsed = _parser().parse_args([], env_vars={option.env_var: raw})
    assert getattr(parsed, option.dest) not in (None, option.default), option.flag


def test_every_entry_has_its_client_options_field_and_no_field_lacks_one() -> None:
    fields = {f.name: f for f in dataclasses.fields(config.ClientOptions)}
    spec_fields = [o.field_name for o in options.OPTIONS]
    assert len(set(spec_fields)) == len(spec_fields)
    assert set(spec_fields) | set(config.LOCUST_FIELDS) == set(fields)
    defaults = options.defaults()
    plain = config.ClientOptions()
    for option in options.OPTIONS:
        field = fields[option.field_name]
        # the spec's default, read as the field reads it, is the field's default
        assert option.value_of(defaults) == getattr(plain, field.name), option.flag
        assert field.repr is not option.secret, f"{option.flag}: a secret stays out of repr"


def test_a_drifted_entry_is_caught() -> None:
    drifted = dataclasses.replace(options.by_name("seed"), field="random_seed")
    with pytest.raises(TypeError):
        config.ClientOptions(**{drifted.field_name: 1})


def test_each_entrys_check_refuses_through_from_namespace() -> None:
    ns = options.defaults()
    ns.llm_connect_timeout = 0.0
    with pytest.raises(InputError, match=r"^--llm-connect-timeout 0: expected a number of"):
        config.from_namespace(ns)
    ns = options.defaults()
    ns.llm_seed = "x"
    with pytest.raises(InputError, match=r"^--llm-seed 'x': expected a whole number"):
        config.from_namespace(ns)
    ns = options.defaults()
    ns.llm_roofline_tp = -1
    with pytest.raises(InputError):
        config.from_namespace(ns)  # a check that spans options (the device) runs too
    checked = {o.name for o in options.OPTIONS if o.check is not None}
    assert {"read-timeout", "max-tokens", "input-len", "ca-bundle", "burstiness"} <= checked


def test_one_output_cap_parser() -> None:
    assert lengths.max_tokens("").mean == lengths.DEFAULT_MAX_TOKENS
    assert lengths.max_tokens("uniform:10,20").mean == 15
    with pytest.raises(InputError, match=r"^Chat\.max_tokens"):
        lengths.max_tokens("uniform:5", what="Chat.max_tokens")
    sources = "\n".join(p.read_text() for p in (ROOT / "locust_llm" / "client").rglob("*.py"))
    assert 'what="--llm-max-tokens"' not in sources.replace(
        'def max_tokens(spec: str, what: str = "--llm-max-tokens")', ""
    )


def test_the_api_key_falls_back_to_openai_api_key_in_one_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    opts = config.ClientOptions()
    assert opts.request_headers()["Authorization"] == "Bearer sk-env"
    assert "sk-env" in redact.secrets_of(opts)
    assert config.ClientOptions(api_key="sk-flag").bearer_key == "sk-flag"
    sources = [p.read_text() for p in (ROOT / "locust_llm").rglob("*.py")]
    assert sum(s.count('environ.get("OPENAI_API_KEY"') for s in sources) == 1


def _imports(module: str) -> set[str]:
    tree = ast.parse(Path(ROOT / (module.replace(".", "/") + ".py")).read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out


@pytest.mark.parametrize(
    "module",
    ["spec", "readers", "validate", "lengths", "table"],
)
def test_the_option_modules_do_not_import_client_options_back(module: str) -> None:
    assert "locust_llm.options.config" not in _imports(f"locust_llm.options.{module}")


def test_class_attributes_come_from_the_spec() -> None:
    """The options a user class attribute overrides: UserSettings' fields and LLMUser's
    attributes, both named as the ClientOptions field, no more and no fewer."""
    marked = {o.field_name for o in options.OPTIONS if o.class_attribute}
    assert marked == set(settings.CLASS_ATTRIBUTES)
    assert {f.name for f in dataclasses.fields(settings.UserSettings)} == marked | {"hosts", "api"}
    tree = ast.parse((ROOT / "locust_llm" / "client" / "user.py").read_text())
    llm_user = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LLMUser")
    declared = {
        n.target.id
        for n in llm_user.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }
    assert marked <= declared, sorted(marked - declared)
    resolved = settings.resolve_settings(config.ClientOptions(), host=None, max_tokens=8)
    assert resolved.max_tokens == "8" and resolved.read_timeout_s == options.READ_TIMEOUT_DEFAULT_S
    with pytest.raises(TypeError):
        settings.resolve_settings(config.ClientOptions(), host=None, seed=1)


def test_the_page_names_each_options_run_flag_and_class_attribute() -> None:
    page = (ROOT / "docs" / "options.md").read_text()
    for option in options.OPTIONS:
        row = next(line for line in page.splitlines() if line.startswith(f"| `{option.flag}"))
        assert (f"the `run` flag `--{option.run_flag}`" in row) is bool(option.run_flag)
        assert (f"`{option.field_name}` attribute" in row) is option.class_attribute


def test_the_web_ui_start_form_fields_come_from_the_spec() -> None:
    """The options marked ``web_ui`` are marked on the parser as Locust's own
    ``include_in_web_ui=True`` marks an action (the stage plan's only with a stage shape), no
    secret among them, and the reference page says which they are."""
    import configargparse

    plain = {"model", "max-tokens", "input-len", "dataset"}
    stages = {"concurrency", "stage-requests", "stage-duration", "rate"}
    for with_stages, names in ((True, plain | stages), (False, plain)):
        parser = configargparse.ArgumentParser()
        options.add_arguments(parser, web_ui_stages=with_stages)
        marked = {a.dest for a in parser._actions if getattr(a, "include_in_web_ui", False)}
        assert marked == {options.by_name(n).dest for n in names}
        assert {o.name for o in options.web_ui_options(stages=with_stages)} == names
    assert not any(o.secret for o in options.OPTIONS if o.web_ui)
    page = (ROOT / "docs" / "options.md").read_text()
    for option in options.OPTIONS:
        row = next(line for line in page.splitlines() if line.startswith(f"| `{option.flag}"))
        assert ("a field of the web UI's start form" in row) is option.web_ui
        assert ("(with a stage shape)" in row) is (option.name in stages)
