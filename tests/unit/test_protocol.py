"""The wire protocol without I/O: frame splitting, the request envelope, argument checks."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roost_core.protocol import (
    BAD_ARGS,
    BAD_JSON,
    FRAME_TOO_LARGE,
    MAX_FRAME,
    EncodedOnce,
    Field,
    FrameDecoder,
    ProtocolError,
    compile_args,
    decode_line,
    encode,
    error,
    ok,
    validate_args,
)


def codes(frames):
    return [f.code if isinstance(f, ProtocolError) else f for f in frames]


# --------------------------------------------------------------------------- FrameDecoder


def test_default_limit_is_one_mebibyte():
    assert MAX_FRAME == 1024 * 1024
    assert FrameDecoder().max_frame == MAX_FRAME


def test_a_frame_split_across_many_feeds_is_decoded_once_complete():
    decoder = FrameDecoder()
    data = encode({"id": 1, "op": "daemon_status", "text": "héllo ✓"})
    # Byte by byte, splitting the UTF-8 sequences too.
    out = []
    for index in range(len(data) - 1):
        out += decoder.feed(data[index : index + 1])
        assert out == []
    assert decoder.pending_bytes == len(data) - 1
    out += decoder.feed(data[-1:])
    assert out == [{"id": 1, "op": "daemon_status", "text": "héllo ✓"}]
    assert decoder.pending_bytes == 0


def test_several_frames_in_one_feed_keep_their_order_and_the_tail_waits():
    decoder = FrameDecoder()
    data = b'{"id":1}\n{"id":2}\n{"id":3}\n{"id":'
    assert decoder.feed(data) == [{"id": 1}, {"id": 2}, {"id": 3}]
    assert decoder.pending_bytes == len(b'{"id":')
    assert decoder.feed(b"4}\n") == [{"id": 4}]


def test_blank_and_whitespace_lines_are_ignored():
    decoder = FrameDecoder()
    assert decoder.feed(b"\n\n   \n\t\n") == []
    assert decoder.feed(b'\n{"id":1}\r\n\n') == [{"id": 1}]


def test_a_frame_of_exactly_the_limit_is_accepted():
    decoder = FrameDecoder(max_frame=20)
    line = b'{"a":"' + b"x" * 12 + b'"}'
    assert len(line) == 20
    assert decoder.feed(line[:10]) == []
    assert decoder.feed(line[10:] + b"\n") == [{"a": "x" * 12}]


def test_an_oversize_frame_in_one_feed_is_refused_and_the_next_frame_decodes():
    decoder = FrameDecoder(max_frame=10)
    out = decoder.feed(b'"' + b"x" * 20 + b'"\n{"id":2}\n')
    assert codes(out) == [FRAME_TOO_LARGE, {"id": 2}]


def test_an_oversize_frame_streamed_in_is_refused_once_and_memory_stays_bounded():
    decoder = FrameDecoder(max_frame=10)
    assert decoder.feed(b"x" * 6) == []
    out = decoder.feed(b"x" * 6)  # now 12 > 10: refused as it streams in, not at the newline
    assert codes(out) == [FRAME_TOO_LARGE]
    for _ in range(50):
        assert decoder.feed(b"y" * 1000) == []  # still the same frame: no second error
        assert decoder.pending_bytes <= 10
    # The rest of the oversize line up to its newline is dropped; the next frame decodes.
    assert decoder.feed(b'yyy\n{"id":7}\n') == [{"id": 7}]
    assert decoder.pending_bytes == 0


def test_an_oversize_frame_that_crosses_the_limit_only_at_its_newline_is_refused():
    decoder = FrameDecoder(max_frame=10)
    assert decoder.feed(b"x" * 8) == []
    assert codes(decoder.feed(b"x" * 3 + b'\n{"id":1}\n')) == [FRAME_TOO_LARGE, {"id": 1}]


def test_recovery_after_discard_keeps_a_partial_next_frame():
    decoder = FrameDecoder(max_frame=10)
    assert codes(decoder.feed(b"z" * 11)) == [FRAME_TOO_LARGE]
    assert decoder.feed(b'zz\n{"id"') == []
    assert decoder.feed(b":9}\n") == [{"id": 9}]


@pytest.mark.parametrize(
    "line, fragment",
    [
        (b"not json", "not JSON"),
        (b"\xff\xfe{}", "UTF-8"),
        (b"[1, 2]", "object"),
        (b'"a string"', "object"),
        (b"42", "object"),
        (b"null", "object"),
        (b"[" * 100_000, "deeply"),
        (b'{"a":' * 100_000, "deeply"),
        (b'{"id": ' + b"9" * 5000 + b"}", "not JSON"),  # past Python's int digit limit
    ],
)
def test_decode_line_refuses_what_is_not_a_json_object(line, fragment):
    result = decode_line(line)
    assert isinstance(result, ProtocolError)
    assert result.code == BAD_JSON
    assert fragment in result.message


def test_decode_line_refuses_lone_surrogates_that_no_answer_could_encode():
    # JSON allows "\ud800"; Python decodes it to a lone surrogate that cannot be encoded
    # to UTF-8 again, so any answer or record that carries it would fail later.
    frame = decode_line(b'{"id": 1, "op": "reply", "text": "\\ud800"}')
    assert isinstance(frame, ProtocolError), "a frame holding a lone surrogate must be refused at decode"
    assert frame.code == BAD_JSON


def test_feed_reports_bad_json_per_line_and_goes_on():
    decoder = FrameDecoder()
    assert codes(decoder.feed(b'nope\n[]\n{"id":3}\n')) == [BAD_JSON, BAD_JSON, {"id": 3}]


# --------------------------------------------------------------------------- frames out


def test_encode_is_one_compact_utf8_line():
    data = encode({"id": 1, "text": "é\nx"})
    assert data.endswith(b"\n") and data.count(b"\n") == 1
    assert data == '{"id":1,"text":"é\\nx"}\n'.encode()


def test_ok_and_error_answers_have_the_documented_shape():
    assert ok(3, {"a": 1}) == {"id": 3, "ok": True, "result": {"a": 1}}
    exc = ProtocolError(BAD_ARGS, "nope", field="x")
    assert error("r", exc) == {"id": "r", "ok": False, "error": {"code": BAD_ARGS, "message": "nope", "field": "x"}}
    assert str(exc) == "nope"


# --------------------------------------------------------------------------- a request's envelope


def read_request(frame: dict[str, Any]) -> Any:
    """``frame`` as the daemon reads a request line (``Dispatcher.decode``)."""
    from roost_core.daemon.dispatch import Dispatcher, Route
    from roost_core.daemon.optable import OPS

    async def nothing(_conn: Any, _args: dict[str, Any]) -> dict[str, Any]:
        return {}

    routes = {name: Route(name, op, nothing, accept=(lambda _conn, _args: {}) if op.accept else None) for name, op in OPS.items()}
    return Dispatcher(routes, ledger=None).decode(json.dumps(frame).encode())  # type: ignore[arg-type]


@pytest.mark.parametrize("request_id", [0, 7, -3, "abc", ""])
def test_a_request_takes_integer_and_string_ids(request_id):
    request = read_request({"id": request_id, "op": "log", "job": "x"})
    assert request.error is None
    assert request.id == request_id
    assert request.route.name == "log"
    assert request.args == {"job": "x"}


@pytest.mark.parametrize("frame", [{"op": "jobs"}, {"id": None, "op": "jobs"}, {"id": True, "op": "jobs"}, {"id": False, "op": "jobs"}, {"id": 1.5, "op": "jobs"}, {"id": [1], "op": "jobs"}, {"id": {}, "op": "jobs"}])
def test_a_request_with_a_bad_or_missing_id_is_refused(frame):
    request = read_request(frame)
    assert request.id is None and request.error.code == BAD_ARGS
    assert "id" in request.error.message


@pytest.mark.parametrize("frame", [{"id": 1}, {"id": 1, "op": ""}, {"id": 1, "op": 5}, {"id": 1, "op": None}, {"id": 1, "op": ["jobs"]}])
def test_a_request_with_a_bad_or_missing_op_is_refused(frame):
    request = read_request(frame)
    assert request.id == 1 and request.error.code == BAD_ARGS
    assert "op" in request.error.message


# --------------------------------------------------------------------------- validate_args

SCHEMA = {
    "name": Field(str, required=True, max_len=5),
    "count": Field(int),
    "ratio": Field(float),
    "note": Field((str, type(None))),
    "flag": Field(bool),
    "even": Field(int, check=lambda v: None if v % 2 == 0 else "must be even"),
}


def bad(args):
    with pytest.raises(ProtocolError) as info:
        validate_args(SCHEMA, args, "op")
    assert info.value.code == BAD_ARGS
    return info.value.message


def test_validate_args_returns_the_known_fields():
    assert validate_args(SCHEMA, {"name": "ab", "count": 2, "flag": False, "note": None}, "op") == {
        "name": "ab",
        "count": 2,
        "flag": False,
        "note": None,
    }


def test_validate_args_refuses_unknown_fields_by_name():
    message = bad({"name": "a", "zeta": 1, "alpha": 2})
    assert "alpha, zeta" in message


def test_validate_args_requires_required_fields_and_null_counts_as_missing():
    assert "missing field 'name'" in bad({})
    assert "missing field 'name'" in bad({"name": None})
    # An optional field sent as null is dropped, unless null is one of its types.
    assert validate_args(SCHEMA, {"name": "a", "count": None}, "op") == {"name": "a"}


@pytest.mark.parametrize(
    "args",
    [
        {"name": 5},
        {"name": ["a"]},
        {"name": "a", "count": "1"},
        {"name": "a", "count": True},  # a bool is not an integer here
        {"name": "a", "count": 1.0},
        {"name": "a", "ratio": "1.5"},
        {"name": "a", "flag": 1},
        {"name": "a", "note": 3},
    ],
)
def test_validate_args_refuses_wrong_types(args):
    assert "must be" in bad(args)


def test_validate_args_accepts_an_integer_for_a_number_but_not_a_bool():
    assert validate_args(SCHEMA, {"name": "a", "ratio": 2}, "op") == {"name": "a", "ratio": 2}
    assert "must be number" in bad({"name": "a", "ratio": True})


def test_validate_args_enforces_max_len_and_custom_checks():
    assert validate_args(SCHEMA, {"name": "abcde"}, "op")["name"] == "abcde"
    assert "longer than 5" in bad({"name": "abcdef"})
    assert validate_args(SCHEMA, {"name": "a", "even": 4}, "op")["even"] == 4
    assert "must be even" in bad({"name": "a", "even": 3})


def test_type_names_in_messages_are_readable():
    message = bad({"name": "a", "note": 3})
    assert "string or null" in message
    assert json.dumps(message)  # plain text


def _wide_listing(rows: int) -> bytes:
    peers = [{"id": f"f{n:07x}", "name": f"peer [{n}]", "live": n % 2 == 0, "summary": None} for n in range(rows)]
    return json.dumps({"id": 1, "ok": True, "result": {"peers": peers}}).encode()


def test_a_wide_frame_with_many_brackets_reads_as_json_reads_it():
    # Thousands of rows are thousands of brackets, but only four levels deep.
    line = _wide_listing(3000)
    assert line.count(b"{") > 3000
    assert decode_line(line) == json.loads(line)


def test_a_wide_frame_that_also_nests_too_deep_is_refused_as_json_would():
    peers = _wide_listing(1000)[:-1]  # without its closing brace
    deep = b'"x": ' + b"[" * 2000 + b"]" * 2000
    result = decode_line(peers + b", " + deep + b"}")
    assert isinstance(result, ProtocolError)
    assert result.code == BAD_JSON and "deeply" in result.message


@pytest.mark.parametrize("depth", [850, 899, 900, 960])
def test_nesting_near_the_limit_in_a_wide_frame_reads_the_same_both_ways(depth):
    # Past 900 levels the json path decides (it refuses near its recursion limit), so the
    # answer never depends on which codec read the line.
    peers = _wide_listing(1000)[:-1]
    line = peers + b', "x": ' + b"[" * depth + b"]" * depth + b"}"
    from roost_core.protocol import _decode_line_json

    fast, reference = decode_line(line), _decode_line_json(line)
    if isinstance(reference, ProtocolError):
        assert isinstance(fast, ProtocolError) and fast.code == reference.code
    else:
        assert fast == reference


def test_clients_read_the_daemons_frames_as_the_reference_reads_them():
    from roost_core.protocol import _decode_line_json, decode_answer

    line = _wide_listing(2000)
    assert decode_answer(line) == _decode_line_json(line)
    assert decode_answer(b'{"event": "deliver", "text": "caf\\u00e9 \\ud83d\\ude00"}') == {"event": "deliver", "text": "café 😀"}
    for bad in (b"not json", b"[1]", b'{"x": NaN}'):
        answer = decode_answer(bad)
        assert isinstance(answer, ProtocolError) and answer.code == BAD_JSON
    decoder = FrameDecoder(decode=decode_answer)
    assert decoder.feed(line + b"\n" + b'{"id": 2}\n') == [json.loads(line), {"id": 2}]


# ------------------------------------------------------------------------- compiled argument checks

_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=2**31 + 3),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.text(min_size=190, max_size=260),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=12),
)


def _outcome(check, *args):
    try:
        return ("ok", check(*args))
    except ProtocolError as exc:
        return ("error", exc.code, exc.message)


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_every_ops_compiled_check_answers_as_validate_args_does(data):
    """What the daemon runs per request (the op's schema compiled) accepts, cleans and
    refuses exactly what ``validate_args`` does, with the same error, for any arguments."""
    from roost_core.daemon.dispatch import OPS

    name = data.draw(st.sampled_from(sorted(OPS)))
    op = OPS[name]
    keys = st.sampled_from([*sorted(op.schema), "zz_unknown", "text"])
    args = data.draw(st.dictionaries(keys, _VALUES, max_size=len(op.schema) + 1))
    frame = {"id": 7, "op": name, **args}
    assert _outcome(op.check, frame) == _outcome(validate_args, op.schema, args, name)


def test_a_compiled_check_reads_the_frame_without_its_id_and_op():
    check = compile_args({"to": Field(str, required=True, max_len=5), "n": Field(float)}, "send")
    assert check({"id": 1, "op": "send", "to": "ab", "n": 2}) == {"to": "ab", "n": 2}
    with pytest.raises(ProtocolError, match="unknown field"):
        check({"id": 1, "op": "send", "to": "ab", "extra": 1})
    with pytest.raises(ProtocolError, match="longer than 5"):
        check({"id": 1, "op": "send", "to": "abcdef"})
    with pytest.raises(ProtocolError, match="must be number"):
        check({"id": 1, "op": "send", "to": "ab", "n": True})


def test_a_list_encoded_once_is_written_as_the_list_it_holds_and_its_json_made_once():
    rows = [{"id": "a1", "name": "Café", "live": True, "status": None}, {"id": "b2", "name": "x\n<y>", "live": False, "status": "busy"}]
    kept = EncodedOnce(rows)
    frame = {"id": 7, "ok": True, "result": {"peers": kept, "sent": []}}
    first = encode(frame)
    assert first == encode({"id": 7, "ok": True, "result": {"peers": rows, "sent": []}})
    assert json.loads(first)["result"]["peers"] == rows
    # The second frame reuses the JSON made for the first: a change to the list after it
    # was shared (which nothing may make) would not show.
    kept.append({"id": "c3"})
    assert encode(frame) == first
    assert kept == [*rows, {"id": "c3"}]


def test_a_list_encoded_once_that_orjson_refuses_is_written_by_json():
    kept = EncodedOnce([{1: "int key"}])
    assert encode({"peers": kept}) == b'{"peers":[{"1":"int key"}]}\n'
