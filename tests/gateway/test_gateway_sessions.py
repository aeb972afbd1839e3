"""SessionMap: conversation fingerprints → device sessions, scoped to the caller (L4)."""

from __future__ import annotations

from edgellm.gateway.sessions import SessionMap

Q = ("user", "What is the capital of France?")
A = "Paris."
NEXT = ("user", "And of Italy?")


def test_a_next_turn_finds_the_session_of_the_conversation_it_extends_once() -> None:
    m = SessionMap(secret=b"s")
    scope = m.scope("Bearer k", "alice")
    first = m.session_for([Q], scope)
    m.remember(first, [Q], A, scope)
    assert m.session_for([Q, ("assistant", A), NEXT], scope) == first
    # taken when used: a second continuation of the same conversation gets a new session
    assert m.session_for([Q, ("assistant", A), NEXT], scope) != first


def test_another_user_or_key_does_not_find_the_conversation() -> None:
    m = SessionMap(secret=b"s")
    alice = m.scope("Bearer k", "alice")
    first = m.session_for([Q], alice)
    m.remember(first, [Q], A, alice)
    history = [Q, ("assistant", A), NEXT]
    assert m.session_for(history, m.scope("Bearer k", "bob")) != first
    assert m.session_for(history, m.scope("Bearer other", "alice")) != first
    assert m.session_for(history, alice) == first  # still there for alice: the others took nothing


def test_an_explicit_id_is_bound_to_the_caller_and_never_sent_as_is() -> None:
    m = SessionMap(secret=b"s")
    one, two = m.scope("Bearer one"), m.scope("Bearer two")
    a = m.session_for([], one, "notebook")
    assert a == m.session_for([Q], one, "notebook")  # stable for the same caller
    assert a != m.session_for([], two, "notebook")
    assert a != m.session_for([], m.scope("Bearer one", "bob"), "notebook")
    assert "notebook" not in a and a.startswith("gw-h-")
    assert (
        SessionMap(secret=b"t").session_for([], SessionMap(secret=b"t").scope("Bearer one"), "notebook") != a
    )


def test_the_map_forgets_the_least_recently_remembered_past_its_capacity() -> None:
    m = SessionMap(capacity=2, secret=b"s")
    for i in range(3):
        m.remember(f"gw-{i}", [("user", str(i))], A)
    assert len(m) == 2
    assert m.session_for([("user", "0"), ("assistant", A), NEXT]) != "gw-0"
    assert m.session_for([("user", "2"), ("assistant", A), NEXT]) == "gw-2"
