"""UTF-8 completeness and stop strings across token boundaries."""

from __future__ import annotations

from edgellm.device.text import StopMatcher, Utf8Stream


def test_multibyte_character_split_across_tokens_is_never_emitted_half() -> None:
    stream = Utf8Stream()
    data = "日本✓".encode()
    out = [stream.push(data[i : i + 1]) for i in range(len(data))]
    assert "".join(out) == "日本✓"
    assert out[:2] == ["", ""]  # the first character needs all three bytes
    assert all("\ufffd" not in piece for piece in out)


def test_incomplete_tail_is_dropped_and_invalid_bytes_replaced() -> None:
    stream = Utf8Stream()
    assert stream.push(b"a\xe6\x97") == "a"
    assert stream.flush() == ""
    assert stream.push(b"\xff b") == "\ufffd b"


def test_stop_string_spanning_tokens() -> None:
    m = StopMatcher(["</end>"])
    emitted = [m.push(t) for t in ["Hello </", "en", "d> tail"]]
    assert "".join(r.text for r in emitted) == "Hello "
    assert emitted[-1].stop == "</end>"


def test_held_back_prefix_is_released_when_it_does_not_match() -> None:
    m = StopMatcher(["STOP"])
    a = m.push("the ST")
    b = m.push("ORM")
    assert a.text == "the "
    assert b.text == "STORM" and b.stop is None
    assert m.flush() == ""


def test_earliest_of_several_stops_wins() -> None:
    m = StopMatcher(["b", "abc"])
    r = m.push("xxabc")
    assert r.text == "xx" and r.stop == "abc"


def test_no_stops_passes_through() -> None:
    m = StopMatcher([])
    assert m.push("abc").text == "abc"
