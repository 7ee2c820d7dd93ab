"""The kernel transport's stamped read and plain-token check: the C forms against the Python
forms, against the stream parser's own classification, and against a real loopback socket."""

from __future__ import annotations

import importlib
import os
import random
import shutil
import socket
import time
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from locust_llm.client import stamped_read
from locust_llm.client.kernel_transport import _plain_tokens, kernel_stamps_available
from locust_llm.client.sse import parse_chunk, text_split
from locust_llm.client.stamped_read import (
    SO_TIMESTAMPNS,
    TCP_INQ,
    event_chunk,
    recv_stamped_py,
    split_tokens_py,
)

LIMIT = 1 << 20
_EVENT = (
    b'data: {"id":"chatcmpl-7","object":"chat.completion.chunk","created":1733400000,'
    b'"model":"m","choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":null}]}\n\n'
)
SPLIT = text_split(_EVENT.replace(b"%s", b"word")[:-2])
compiled = pytest.mark.skipif(
    not stamped_read.COMPILED, reason="the C module is not built here (test_the_c_module_is_built)"
)


@dataclass
class _Steady:
    """What ``_plain_tokens`` reads of a steady stream."""

    split: object
    classify: object = parse_chunk
    max_event_bytes: int = LIMIT
    split_hits: int = 0


def _chunk(text: bytes) -> bytes:
    event = _EVENT.replace(b"%s", text)
    return b"%x\r\n" % len(event) + event + b"\r\n"


def _mutate(data: bytes, rng: random.Random) -> bytes:
    """One of the ways a read can differ from plain token chunks (or a no-op)."""
    pos = rng.randrange(len(data) + 1)
    kind = rng.randrange(9)
    if kind == 0:  # cut short
        return data[:pos]
    if kind == 1:  # a byte changed
        return data[:pos] + bytes([rng.randrange(256)]) + data[pos + 1 :]
    if kind == 2:  # a quote, a newline or a backslash in the text or anywhere
        return data[:pos] + rng.choice([b'"', b"\n", b"\\", b"\r\n"]) + data[pos:]
    if kind == 3:  # the size in upper case, with leading zeros, with 0x, off by one
        head, _, rest = data.partition(b"\r\n")
        size = int(head, 16)
        form = rng.choice(
            [b"%X" % size, b"00%x" % size, b"0x%x" % size, b"%x" % (size + 1), b" %x" % size]
        )
        return form + b"\r\n" + rest
    if kind == 4:  # a token event that is no plain token (finish reason, usage, role)
        other = rng.choice(
            [b'"finish_reason":"stop"', b'"role":"assistant"', b'"usage":{"total_tokens":3}']
        )
        return data.replace(b'"finish_reason":null', other, 1)
    if kind == 5:  # the stream's end
        return data + b"e\r\ndata: [DONE]\n\n\r\n"
    if kind == 6:  # two events in one chunk
        event = _EVENT.replace(b"%s", b"x")
        both = event + event
        return data + b"%x\r\n" % len(both) + both + b"\r\n"
    if kind == 7:  # an empty text (no middle)
        return data + _chunk(b"")
    return data


def _reads(rng: random.Random, count: int) -> list[bytes]:
    words = [b"a", b" word", b"\\u00e9t\\u00e9", b" 42", b"\\\\", b"\\n", b" \\/ "]
    out = []
    for _ in range(count):
        data = b"".join(_chunk(rng.choice(words)) for _ in range(rng.randint(1, 4)))
        for _ in range(rng.randrange(3)):
            data = _mutate(data, rng)
        out.append(data)
    return out


def test_the_python_check_counts_what_the_stream_parser_reads_as_plain_tokens() -> None:
    """Where every chunk fits the split, the count is the parser's own count of content-token
    events (the long path, no split); where it says 0, it took nothing for a token."""
    rng = random.Random(5)
    counted = 0
    for data in _reads(rng, 3000):
        fast = split_tokens_py(data, SPLIT[0], SPLIT[1], LIMIT)
        if fast:
            counted += 1
            assert _plain_tokens(data, _Steady(split=None)) == fast, data
    assert counted > 500  # the mutations leave many reads whole


@compiled
def test_the_c_check_answers_as_the_python_one() -> None:
    c_split_tokens = stamped_read.split_tokens
    rng = random.Random(11)
    answers = set()
    for data in _reads(rng, 5000):
        for head, tail in (SPLIT, (SPLIT[0], b"}"), (b"data: ", SPLIT[1])):
            for limit in (LIMIT, 200, -1, 2**63 - 1, 2**70):  # any --llm-max-event-bytes
                want = split_tokens_py(data, head, tail, limit)
                assert c_split_tokens(data, head, tail, limit) == want, (data, head, tail, limit)
                answers.add(want)
    assert answers >= {0, 1, 2, 3, 4}


@compiled
@settings(max_examples=400, deadline=None)
@given(
    pieces=st.lists(
        st.one_of(
            st.sampled_from([b" a", b"", b'"', b"\\", b"\n", b"\r\n", b"data:", b"0x"]),
            st.binary(max_size=6),
        ),
        max_size=4,
    ),
    cut=st.integers(min_value=0, max_value=400),
    extra=st.binary(max_size=12),
)
def test_the_c_check_answers_as_the_python_one_on_any_bytes(pieces, cut, extra) -> None:
    data = b"".join(_chunk(piece) for piece in pieces)[:cut] + extra
    for limit in (LIMIT, 150, 0):
        want = split_tokens_py(data, SPLIT[0], SPLIT[1], limit)
        assert stamped_read.split_tokens(data, SPLIT[0], SPLIT[1], limit) == want


def test_a_read_that_fits_the_split_counts_its_hits_and_one_that_does_not_takes_the_long_path() -> (
    None
):
    steady = _Steady(split=SPLIT)
    assert _plain_tokens(_chunk(b" a") + _chunk(b" b"), steady) == 2
    assert steady.split_hits == 2
    # a text with a quote: the split does not fit it, the parser still reads a token
    assert _plain_tokens(_chunk(b'say \\"hi\\"'), steady) == 1


@pytest.mark.parametrize("size", [b"0x%x", b" %x", b"+%x", b"%x ", b"%x;ext=1"])
def test_a_chunk_size_that_is_not_plain_hex_is_left_to_the_parser(size: bytes) -> None:
    """A size line Python's ``int(x, 16)`` might take (or an extension) is not the plain form
    both checks read: each answers 0 and the read goes the long way (the HTTP reader's own
    framing), as the C check does."""
    plain = _chunk(b" a")
    body = plain[plain.index(b"\r\n") :]
    odd = size % (len(body) - 4) + body
    assert event_chunk(plain, 0, LIMIT) == (plain.index(b"\r\n") + 2, len(plain))
    assert event_chunk(odd, 0, LIMIT) is None
    assert _plain_tokens(odd, _Steady(split=SPLIT)) == 0
    assert _plain_tokens(odd, _Steady(split=None)) == 0
    assert stamped_read.split_tokens(odd, *SPLIT, LIMIT) == 0


@pytest.fixture
def stamped_pair():
    """A loopback TCP pair whose receiver asks for receive stamps and queue lengths."""
    if not kernel_stamps_available():
        pytest.skip("no kernel receive stamps on this system")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        sender = socket.create_connection(listener.getsockname())
        receiver, _ = listener.accept()
    receiver.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    receiver.setsockopt(socket.IPPROTO_TCP, TCP_INQ, 1)
    receiver.setblocking(False)
    yield sender, receiver
    sender.close()
    receiver.close()


def _wait_readable(sock: socket.socket, size: int) -> None:
    """Until ``size`` bytes are queued on ``sock`` (5 s at most)."""
    deadline = time.monotonic() + 5
    while True:
        try:
            queued = len(sock.recv(1 << 20, socket.MSG_PEEK))
        except BlockingIOError:
            queued = 0
        if queued >= size:
            return
        assert time.monotonic() < deadline, "the bytes did not come"
        time.sleep(0.001)


@pytest.fixture(params=["python", "c"])
def recv(request):
    """The read in each form."""
    if request.param == "c" and not stamped_read.COMPILED:
        pytest.skip("the C module is not built here (test_the_c_module_is_built)")
    return stamped_read.recv_stamped if request.param == "c" else recv_stamped_py


def test_a_read_has_its_kernel_stamp_its_queue_state_and_its_clock(stamped_pair, recv) -> None:
    sender, receiver = stamped_pair
    assert recv(receiver) is None  # nothing queued: no error, no bytes
    before = time.time_ns()
    sender.sendall(b"token")
    _wait_readable(receiver, 5)
    data, stamp_ns, drained, now_ns = recv(receiver)
    assert data == b"token" and drained
    assert before <= stamp_ns <= now_ns <= time.time_ns()
    big = bytes(100_000)  # more than one read takes: the first leaves bytes queued
    sender.sendall(big)
    _wait_readable(receiver, 65536 + 1)
    first = recv(receiver)
    assert first is not None and len(first[0]) == 65536 and first[1] and not first[2]
    rest = b""
    while len(first[0]) + len(rest) < len(big):
        got = recv(receiver)
        if got is not None:
            rest += got[0]
    assert got[2]  # the read that emptied the queue says so


def test_a_reset_and_a_closed_socket_raise_what_the_socket_raises(stamped_pair, recv) -> None:
    sender, receiver = stamped_pair
    sender.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sender.close()  # linger 0: a reset
    deadline = time.monotonic() + 5
    with pytest.raises(ConnectionResetError):
        while time.monotonic() < deadline:
            recv(receiver)
            time.sleep(0.001)
    receiver.close()
    with pytest.raises(OSError) as closed:
        recv(receiver)
    assert closed.value.errno == 9  # EBADF, never a read of a reused descriptor


def test_the_c_module_is_built_where_a_c_compiler_is() -> None:
    """The package builds its C module wherever the machine has a compiler (CI's does): the
    speed the benchmarks publish is the one users get."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler on this machine: the Python forms run")
    if os.environ.get("LOCUST_LLM_PURE_PYTHON", "") not in ("", "0"):
        pytest.skip("LOCUST_LLM_PURE_PYTHON is set: the Python forms run by choice")
    assert stamped_read.COMPILED


def test_the_pure_python_switch_turns_the_c_forms_off(monkeypatch) -> None:
    monkeypatch.setenv("LOCUST_LLM_PURE_PYTHON", "1")
    try:
        module = importlib.reload(stamped_read)
        assert not module.COMPILED
        assert module.split_tokens is module.split_tokens_py
        assert module.recv_stamped is module.recv_stamped_py
    finally:
        monkeypatch.delenv("LOCUST_LLM_PURE_PYTHON")
        importlib.reload(stamped_read)
