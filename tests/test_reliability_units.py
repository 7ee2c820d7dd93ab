"""Unit tests of the reliability pieces: journal, back-off, redactor, checks."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from locust_llm.client.backoff import Backoff
from locust_llm.client.recorder import Recorder
from locust_llm.client.redact import Redactor, redactor_for
from locust_llm.client.runinfo import masked_command_line
from locust_llm.errors import InputError
from locust_llm.metrics import RequestRecord
from locust_llm.options import config
from locust_llm.options.table import defaults
from locust_llm.rundir.journal import RecordJournal, journal_to_parquet, read_journal


def _rows(n: int, start: int = 0) -> list[tuple[object, ...]]:
    recorder = Recorder(is_worker=False)
    for i in range(start, start + n):
        recorder.add(RequestRecord(request_id=f"r{i}", endpoint="/e", ok=True, e2e_s=0.1 * i))
    return recorder.unflushed


def test_a_journal_cut_mid_batch_keeps_every_whole_batch(tmp_path: Path) -> None:
    path = tmp_path / "requests.arrows"
    journal = RecordJournal(path)
    journal.append(_rows(5))
    journal.append(_rows(3, start=5))
    size_after_two = path.stat().st_size
    journal.append(_rows(4, start=8))
    journal.close()
    # a crash while the third batch was being written: only part of it reached the disk
    data = path.read_bytes()
    path.write_bytes(data[: size_after_two + (len(data) - size_after_two) // 2])
    table, clean = read_journal(path)
    assert not clean
    assert table.column("request_id").to_pylist() == [f"r{i}" for i in range(8)]
    rows = journal_to_parquet(path, tmp_path / "requests.parquet")
    assert rows == 8


def test_the_recorder_finalises_the_journal_to_parquet_without_keeping_rows(
    tmp_path: Path,
) -> None:
    import pandas as pd

    from locust_llm.rundir.layout import RunInfo, read_run_info

    recorder = Recorder(is_worker=False)
    recorder.open_journal(tmp_path)
    for i in range(10):
        recorder.add(RequestRecord(request_id=f"r{i}", endpoint="/e", model="m", ok=i % 2 == 0))
        if i % 3 == 0:
            assert recorder.flush() > 0
            assert not recorder.unflushed  # nothing kept once on disk
    recorder.finalise(tmp_path, RunInfo(run_id="x", state="finished"))
    frame = pd.read_parquet(tmp_path / "requests.parquet")
    assert list(frame["request_id"]) == [f"r{i}" for i in range(10)]
    assert frame["ok"].dtype == bool and frame["ok"].sum() == 5
    assert recorder.values_of("model") == {"m"} and recorder.count == 10
    assert read_run_info(tmp_path).state == "finished"
    recorder.remove_journal()
    assert not (tmp_path / "requests.arrows").exists()


def test_backoff_doubles_with_jitter_up_to_the_cap_and_resets_on_an_answer() -> None:
    rng = random.Random(1)
    backoff = Backoff(cap_s=2.0)
    waits = [backoff.after("connect", rng) for _ in range(8)]
    ceilings = [min(2.0, 0.1 * 2**i) for i in range(8)]
    assert all(c / 2 <= w <= c for w, c in zip(waits, ceilings, strict=True))
    assert backoff.after("cancelled", rng) == 0.0 and backoff.failures == 8  # neutral
    assert backoff.after("http_5xx", rng) == 0.0 and backoff.failures == 0  # it answered
    assert Backoff(cap_s=0).after("connect", rng) == 0.0


def test_the_redactor_masks_secret_values_however_they_were_given() -> None:
    opts = config.from_namespace(
        _namespace(llm_api_key="sk-abc123", llm_header=["X-Tenant: hush", "X-On: 1"])
    )
    redact = redactor_for(opts)
    assert redact("echo: Bearer sk-abc123, X-Tenant=hush") == "echo: Bearer ***, X-Tenant=***"
    assert redact("X-On: 1") == "X-On: 1"  # a 1-character value would mask everything
    argv = ["locust", "--llm-api-k", "sk-abc123", "--llm-head", "X-Tenant: hush"]
    assert masked_command_line(argv, ["sk-abc123", "hush"]) == [
        "locust", "--llm-api-k", "***", "--llm-head", "X-Tenant: ***",
    ]  # fmt: skip
    assert Redactor(["ab", "abcdef"])("abcdef") == "***"  # the longer secret first


def _namespace(**overrides: object) -> object:
    ns = defaults()
    for key, value in overrides.items():
        setattr(ns, key, value)
    return ns


@pytest.mark.parametrize(
    ("overrides", "flag"),
    [
        ({"llm_read_timeout": 0.0}, "--llm-read-timeout"),
        ({"llm_record_batch_s": 0.0}, "--llm-record-batch-s"),
        ({"llm_scrape_interval": -1.0}, "--llm-scrape-interval"),
        ({"llm_max_tokens": "uniform:5"}, "--llm-max-tokens"),
        ({"llm_input_len": "-5"}, "--llm-input-len"),
        ({"llm_backoff_max": float("nan")}, "--llm-backoff-max"),
        ({"llm_burstiness": "x"}, "--llm-burstiness"),
        ({"llm_ca_bundle": "/no/such/ca.pem"}, "--llm-ca-bundle"),
    ],
)
def test_option_values_are_checked_once_at_the_edge(
    overrides: dict[str, object], flag: str
) -> None:
    with pytest.raises(InputError) as err:
        config.from_namespace(_namespace(**overrides))
    assert str(err.value).startswith(flag) and "\n" not in str(err.value)
