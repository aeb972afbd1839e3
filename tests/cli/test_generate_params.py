"""GenerateParams: the one mapping to the wire, shared by the CLI, the Python client and the gateway."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import fields, replace

import pytest

from edgellm.cli import build_parser
from edgellm.client.client import build_request
from edgellm.client.commands.common_args import params_from_args
from edgellm.client.params import Constraint, GenerateParams
from edgellm.gateway.params import parse
from edgellm.v1 import device_pb2

EVERY_FIELD = GenerateParams(
    prompt="",
    messages=(("system", "Be brief."), ("user", "Hi")),
    max_new_tokens=40,
    temperature=0.5,
    top_k=20,
    top_p=0.75,
    min_p=0.25,
    repetition_penalty=1.5,
    presence_penalty=0.5,
    frequency_penalty=-0.25,
    logit_bias=((7, 3.5), (42, -100.0)),
    seed=11,
    stop=("\n\n", "END"),
    session_id="s1",
    model="smollm2",
    request_id="r1",
    kv_window=128,
    n_keep=4,
    constraint=Constraint("regex", "[a-z]+"),
    speculation="fast",
    logprobs=True,
    top_logprobs=5,
    prompt_logprobs=True,
)


def test_every_field_of_the_params_lands_in_its_proto_field() -> None:
    r = EVERY_FIELD.to_proto()
    s = r.sampling
    assert [(m.role, m.content) for m in r.messages] == [("system", "Be brief."), ("user", "Hi")]
    assert (r.prompt, r.max_new_tokens, list(r.stop)) == ("", 40, ["\n\n", "END"])
    assert (r.session_id, r.model, r.request_id, r.kv_window, r.n_keep) == ("s1", "smollm2", "r1", 128, 4)
    assert r.constraint.regex == "[a-z]+" and r.speculation == device_pb2.SPECULATION_FAST
    assert (r.logprobs, r.top_logprobs, r.prompt_logprobs) == (True, 5, True)
    assert (s.temperature, s.top_k, s.top_p, s.min_p) == (0.5, 20, 0.75, 0.25)
    assert (s.repetition_penalty, s.presence_penalty, s.frequency_penalty) == (1.5, 0.5, -0.25)
    assert dict(s.logit_bias) == {7: 3.5, 42: -100.0} and s.HasField("seed") and s.seed == 11


def test_every_proto_field_is_covered_by_the_params() -> None:
    """A new GenerateRequest or SamplingParams field fails here until GenerateParams maps it."""
    r = EVERY_FIELD.to_proto()
    # prompt and prompt_token_ids: chat messages instead
    for message, left_out in ((r, {"prompt", "prompt_token_ids"}), (r.sampling, set())):
        every = {f.name for f in message.DESCRIPTOR.fields}
        assert every - {f.name for f, _ in message.ListFields()} == left_out
    assert GenerateParams(prompt="hello").to_proto().prompt == "hello"
    assert GenerateParams(prompt_token_ids=(1, 2)).to_proto().prompt_token_ids == [1, 2]


def test_the_params_round_trip_through_the_proto() -> None:
    assert GenerateParams.from_proto(EVERY_FIELD.to_proto()) == EVERY_FIELD
    plain = GenerateParams(prompt="x")
    assert GenerateParams.from_proto(plain.to_proto()) == plain


@pytest.mark.parametrize(
    "constraint",
    [
        Constraint("json_object"),
        Constraint("json_schema", '{"type": "object"}'),
        Constraint("regex", "a+"),
        Constraint("lark_grammar", "start: /a+/"),
    ],
)
def test_each_kind_of_constraint_round_trips(constraint: Constraint) -> None:
    message = constraint.to_proto()
    assert message.WhichOneof("kind") == constraint.kind
    assert Constraint.from_proto(message) == constraint
    assert Constraint.from_proto(device_pb2.OutputConstraint()) is None


def test_default_params_send_what_an_empty_request_means() -> None:
    """Proto3 zeros mean "off": a GenerateParams() adds only the budget and speculation auto."""
    expected = device_pb2.GenerateRequest(max_new_tokens=256, speculation=device_pb2.SPECULATION_AUTO)
    expected.sampling.SetInParent()
    assert GenerateParams().to_proto() == expected


def test_build_request_sends_the_same_request_as_before() -> None:
    """The Python client's build_request keeps its signature and its wire output."""
    r = build_request("hi", None, 32, 0.3, 5, ["x"], "s", "off", top_p=0.5, frequency_penalty=0.7)
    expected = device_pb2.GenerateRequest(
        prompt="hi",
        max_new_tokens=32,
        sampling=device_pb2.SamplingParams(temperature=0.3, seed=5, top_p=0.5, frequency_penalty=0.7),
        stop=["x"],
        session_id="s",
        speculation=device_pb2.SPECULATION_OFF,
    )
    assert r == expected


def test_the_cli_and_the_gateway_send_the_same_request_for_the_same_settings() -> None:
    argv = [
        "generate", "--chat", "--max-new-tokens", "40", "--temperature", "0.5", "--top-k", "20",
        "--top-p", "0.75", "--min-p", "0.25", "--repetition-penalty", "1.5", "--presence-penalty",
        "0.5", "--frequency-penalty", "-0.25", "--seed", "11", "--stop", "END", "--speculation", "off",
        "Hi",
    ]  # fmt: skip
    ns = build_parser().parse_args(argv)
    cli = params_from_args(ns, messages=(("user", "Hi"),)).to_proto()
    body = {
        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 40, "temperature": 0.5,
        "top_k": 20, "top_p": 0.75, "min_p": 0.25, "repetition_penalty": 1.5, "presence_penalty": 0.5,
        "frequency_penalty": -0.25, "seed": 11, "stop": ["END"], "speculation": "off",
    }  # fmt: skip
    gateway = parse("chat", body, 512).request
    assert cli == gateway


def test_the_python_client_sends_its_arguments_and_constraint_through_the_params() -> None:
    from edgellm.client.client import DaemonClient, json_schema_constraint

    sent: list[device_pb2.GenerateRequest] = []

    def stream(request: device_pb2.GenerateRequest) -> Iterator[device_pb2.GenerateResponse]:
        sent.append(request)
        return iter(())

    client = DaemonClient.__new__(DaemonClient)  # no channel: `stream` stands in for the daemon
    client.stream = stream  # type: ignore[method-assign]
    client.generate("hi", max_new_tokens=8, seed=3, constraint=json_schema_constraint("{}"), top_k=5)
    expected = GenerateParams(
        prompt="hi", max_new_tokens=8, seed=3, top_k=5, constraint=Constraint("json_schema", "{}")
    )
    assert sent == [expected.to_proto()]


def test_every_field_of_the_params_is_set_away_from_its_default_above() -> None:
    """So the round trip and coverage tests see every field: a new one fails here until added."""
    default = GenerateParams()
    unset = {
        f.name for f in fields(GenerateParams) if getattr(EVERY_FIELD, f.name) == getattr(default, f.name)
    }
    # a request carries messages, a prompt or token ids; the other two are checked above
    assert unset == {"prompt", "prompt_token_ids"}


def test_no_client_signature_repeats_a_generate_field() -> None:
    """The Python client's calls take the fields through GenerateParams, whose defaults are the only ones."""
    from edgellm.client.client import DaemonClient, params_from

    names = {f.name for f in fields(GenerateParams)}
    for call in (DaemonClient.generate, params_from, build_request):
        assert names.isdisjoint(inspect.signature(call).parameters), call


def test_the_python_client_takes_every_field_by_name_and_the_old_positions() -> None:
    from edgellm.client.client import params_from

    by_name = {f.name: getattr(EVERY_FIELD, f.name) for f in fields(GenerateParams)}
    assert params_from(**by_name) == EVERY_FIELD
    assert params_from() == GenerateParams()
    assert params_from(params=EVERY_FIELD, seed=None) == replace(EVERY_FIELD, seed=None)
    loose = params_from(
        None, [["user", "Hi"]], stop=["x"], logit_bias={9: 1.0, 2: -1.0}, constraint=Constraint("regex", "a")
    )
    assert loose == GenerateParams(
        messages=(("user", "Hi"),),
        stop=("x",),
        logit_bias=((2, -1.0), (9, 1.0)),
        constraint=Constraint("regex", "a"),
    )
    with pytest.raises(TypeError):
        params_from(temprature=0.5)  # a misspelt field is refused, not ignored
    with pytest.raises(TypeError):
        params_from("hi", prompt="hi")
    with pytest.raises(TypeError):
        params_from(*range(9))


def test_the_recommendation_changes_only_sampling_values_and_the_cli_defaults_are_its_own() -> None:
    from edgellm.client.sampling import RECOMMENDED

    default = GenerateParams()
    changed = {
        f.name for f in fields(GenerateParams) if getattr(RECOMMENDED, f.name) != getattr(default, f.name)
    }
    assert changed == {"temperature", "top_p", "repetition_penalty", "frequency_penalty"}
    ns = build_parser().parse_args(["generate", "x"])
    # Unset sampling options are the model's (None here); without a model's defaults, RECOMMENDED.
    assert ns.temperature is None and ns.top_p is None and ns.repetition_penalty is None
    sent = params_from_args(ns)
    for name in ("max_new_tokens", *RECOMMENDED.sampling()):
        assert getattr(sent, name) == getattr(RECOMMENDED, name), name
    assert (ns.seed, ns.speculation) == (None, "auto")
    assert ns.kv_window == default.kv_window
    assert RECOMMENDED.sampling() == {
        "temperature": 0.2, "top_k": 0, "top_p": 0.5, "min_p": 0.0, "repetition_penalty": 1.0,
        "presence_penalty": 0.0, "frequency_penalty": 0.7,
    }  # fmt: skip
