"""Every message type reads back what it wrote, and refuses anything else with MessageRefused.

The message types are found, not listed: every pydantic model or dataclass of
:mod:`pipeline.messages` with ``to_json``/``from_json`` (or ``to_dict``/``from_dict``), so a
type added later is covered without touching this file. Instances are built from the types'
own hints (:func:`strategy_for`), payloads are mutated at any depth (a key dropped, a value
swapped for another type, NaN, a huge number, nested garbage, a broken vector encoding, another
version) and foreign JSON is thrown at every reader. The only exception allowed out of a reader
is :class:`MessageRefused`; a payload it accepts gives a message whose every field has the type
its hint says, which encodes back to strict JSON.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Annotated, Any, Literal, Union

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from pipeline import message_fields, messages
from pipeline.config.agent_id import is_valid_agent_id, normalize_agent_id_strict
from pipeline.errors import MessageRefused
from pipeline.messages import EmbedJob, EmbedResult

#: 50 examples per property and message type: about 4,000 generated payloads a run, and each
#: CI run draws new ones (no example database), so the search keeps widening run after run.
RELAXED = settings(deadline=None, max_examples=50,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                          HealthCheck.filter_too_much])


def discover() -> list[tuple[type, str, str]]:
    """(class, encoder name, decoder name) of every message type in pipeline.messages (its
    pydantic models, and the dataclasses of pipeline.message_fields: the values the store and
    providers use too)."""
    found = []
    for obj in vars(messages).values():
        if not (isinstance(obj, type) and (dataclasses.is_dataclass(obj) or is_model(obj))
                and obj.__module__ in (messages.__name__, message_fields.__name__)):
            continue
        for encode, decode in (("to_json", "from_json"), ("to_dict", "from_dict")):
            if callable(getattr(obj, encode, None)) and callable(getattr(obj, decode, None)):
                found.append((obj, encode, decode))
                break
    return found


def is_model(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, BaseModel)


def is_named_tuple(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, tuple) and hasattr(hint, "_fields")


MESSAGE_TYPES = discover()
IDS = [cls.__name__ for cls, _, _ in MESSAGE_TYPES]


def test_the_message_types_are_found() -> None:
    names = set(IDS)
    assert {"EmbedJob", "EmbedResult", "BatchSubmit", "BatchPoll", "BatchUpdate",
            "IndexRequest", "QmdJobRequest", "Route", "ProviderSpec", "ChunkText",
            "BatchOptions"} <= names


# -- building instances from type hints -------------------------------------------------------

#: Text of three shapes, so a field that wants a memory name or an absolute path gets one
#: often enough, whatever it is called.
TEXTS = st.one_of(st.text(max_size=12),
                  st.from_regex(r"[a-z0-9][a-z0-9_-]{0,10}", fullmatch=True),
                  st.from_regex(r"/[a-z0-9_./-]{1,24}", fullmatch=True))
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=8)
VECTORS = st.lists(st.floats(-1e3, 1e3, width=32), min_size=8, max_size=8).map(
    lambda xs: np.asarray(xs, dtype=np.float32))


def strategy_for(hint: Any) -> st.SearchStrategy[Any]:
    """Values of type ``hint``; message-ish (whole numbers >= 0, finite numbers, vectors of
    one width) but not filtered: some are refused, which the tests allow."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:  # a pydantic field type: its checks are the message's
        return strategy_for(args[0])
    simple: dict[Any, st.SearchStrategy[Any]] = {
        Any: JSON, str: TEXTS, bool: st.booleans(), int: st.integers(0, 2**40),
        float: st.floats(0, 1e9), type(None): st.none(), np.ndarray: VECTORS}
    if hint in simple:
        return simple[hint]
    if origin is Literal:
        return st.sampled_from(args)
    if origin in (Union, types.UnionType):
        return st.one_of(*(strategy_for(a) for a in args))
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(strategy_for(args[0]), max_size=3).map(tuple)
        return st.tuples(*(strategy_for(a) for a in args))
    if origin in (list, Sequence):
        return st.lists(strategy_for(args[0]), max_size=3)
    if origin in (dict, Mapping):
        return st.dictionaries(TEXTS, strategy_for(args[1]), max_size=3)
    if typing.is_typeddict(hint):
        return st.fixed_dictionaries({k: strategy_for(v)
                                      for k, v in typing.get_type_hints(hint).items()})
    if dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        return st.builds(hint, **{f.name: strategy_for(hints[f.name])
                                  for f in dataclasses.fields(hint) if f.init})
    if is_named_tuple(hint):
        return st.builds(hint, *map(strategy_for, typing.get_type_hints(hint).values()))
    if is_model(hint):
        return st.builds(partial(built, hint), **{
            f.alias or name: strategy_for(f.annotation) for name, f in hint.model_fields.items()}
        ).filter(lambda message: message is not None)
    raise TypeError(f"no strategy for {hint!r}: teach strategy_for this type")


def built(cls: type, **fields: Any) -> Any:
    """``cls(**fields)``, or None when the message refuses to be built from these values (a
    pydantic message checks its fields when it is built, as when it is read)."""
    try:
        return cls(**fields)
    except MessageRefused:
        return None


def conforms(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of type ``hint`` the way a message must be: numbers finite,
    vectors 1-D float32 and finite, free-form JSON plain."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        return conforms(value, args[0])
    if hint is Any:
        return is_plain_json(value)
    if hint is float:
        return isinstance(value, float) and math.isfinite(value)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint in (str, bool, type(None)):
        return type(value) is hint
    if hint is np.ndarray:
        return (isinstance(value, np.ndarray) and value.ndim == 1 and value.size > 0
                and value.dtype == np.float32 and bool(np.isfinite(value).all()))
    if origin is Literal:
        return value in args
    if origin in (Union, types.UnionType):
        return any(conforms(value, a) for a in args)
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(conforms(v, args[0]) for v in value)
        return len(value) == len(args) and all(map(conforms, value, args))
    if origin is list:
        return isinstance(value, list) and all(conforms(v, args[0]) for v in value)
    if origin in (dict, Mapping):
        return isinstance(value, Mapping) and all(
            isinstance(k, str) and conforms(v, args[1]) for k, v in value.items())
    if typing.is_typeddict(hint):
        hints = typing.get_type_hints(hint)
        return isinstance(value, dict) and set(value) == set(hints) and all(
            conforms(value[k], h) for k, h in hints.items())
    if dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        return isinstance(value, hint) and all(
            conforms(getattr(value, f.name), hints[f.name]) for f in dataclasses.fields(hint))
    if is_named_tuple(hint):
        return isinstance(value, hint) and all(
            map(conforms, value, typing.get_type_hints(hint).values()))
    if is_model(hint):
        return isinstance(value, hint) and all(
            conforms(getattr(value, name), f.annotation) for name, f in hint.model_fields.items())
    raise TypeError(f"cannot check {hint!r}: teach conforms this type")


def is_plain_json(value: Any) -> bool:
    if value is None or isinstance(value, bool | str):
        return True
    if isinstance(value, int):
        return abs(value) < 2**63
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(map(is_plain_json, value))
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_plain_json(v) for k, v in value.items())
    return False


def codec(cls: type, encode: str, decode: str) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    return (lambda message: getattr(message, encode)()), getattr(cls, decode)


def read_or_refuse(cls: type, decode: Callable[[Any], Any], encode: Callable[[Any], Any],
                   payload: Any) -> Any:
    """``decode(payload)``: refused with MessageRefused, or a well-typed message that
    encodes back to strict JSON. Anything else fails the test."""
    try:
        message = decode(payload)
    except MessageRefused as exc:
        assert str(exc), "a refusal says why"
        return None
    assert conforms(message, cls), f"{cls.__name__} accepted ill-typed {payload!r:.300}"
    json.dumps(encode(message), allow_nan=False)
    return message


# -- round trips ------------------------------------------------------------------------------

@pytest.mark.parametrize(("cls", "encode", "decode"), MESSAGE_TYPES, ids=IDS)
def test_a_message_reads_back_as_written_or_is_refused(cls: type, encode: str,
                                                       decode: str) -> None:
    to, back = codec(cls, encode, decode)

    @RELAXED
    @given(strategy_for(cls))
    def check(message: Any) -> None:
        payload = json.loads(json.dumps(to(message)))  # as Celery's JSON serializer hands it
        again = read_or_refuse(cls, back, to, payload)
        if again is not None:
            assert json.loads(json.dumps(to(again))) == payload

    check()


# -- mutations and foreign payloads -----------------------------------------------------------

def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


#: Values that are wrong in ways a naive reader trips on.
NASTY_VALUES: list[Any] = [
    None, True, 0, -1, 2**63, -(2**63) - 1, 10**400, math.nan, math.inf, -math.inf, 1e308,
    "", "\x00", "\ud800", "../../etc/passwd", "not base64!", "AAA", "AAAAAA==",
    _b64(np.array([np.nan], dtype="<f4").tobytes()),
    _b64(np.array([np.inf], dtype="<f4").tobytes()),
    _b64(b"\x00\x00\x00"), _b64(b""), [], {}, [[]], {"": None}, [None, None, None], "x" * 5000,
]
NASTY = st.sampled_from(NASTY_VALUES)
GARBAGE = st.one_of(NASTY, JSON, st.floats(), st.integers(),
                    st.binary(max_size=12).map(_b64), st.text())


@st.composite
def mutated(draw: st.DrawFn, value: Any) -> Any:
    """``value`` with one change somewhere inside it."""
    children = (list(value.items()) if isinstance(value, dict)
                else list(enumerate(value)) if isinstance(value, list) else [])
    if children and draw(st.booleans()):
        key, child = draw(st.sampled_from(children))
        copy = dict(value) if isinstance(value, dict) else list(value)
        copy[key] = draw(mutated(child))
        return copy
    how = draw(st.sampled_from(["replace", "drop", "add", "empty", "wrap"]))
    if how == "drop" and children:
        key = draw(st.sampled_from([k for k, _ in children]))
        if isinstance(value, dict):
            return {k: v for k, v in value.items() if k != key}
        return [v for i, v in enumerate(value) if i != key]
    if how == "add" and isinstance(value, dict):
        return {**value, draw(st.text(max_size=6)): draw(GARBAGE)}
    if how == "add" and isinstance(value, list):
        return [*value, draw(GARBAGE)]
    if how == "empty":
        return type(value)() if isinstance(value, dict | list | str) else None
    if how == "wrap":
        return draw(st.sampled_from([[value], {"v": 1, "payload": value}, json.dumps(value)]))
    return draw(GARBAGE)


@pytest.mark.parametrize(("cls", "encode", "decode"), MESSAGE_TYPES, ids=IDS)
def test_a_mutated_message_is_refused_or_well_formed(cls: type, encode: str,
                                                     decode: str) -> None:
    to, back = codec(cls, encode, decode)

    @RELAXED
    @given(st.data())
    def check(data: st.DataObject) -> None:
        payload = json.loads(json.dumps(to(data.draw(strategy_for(cls)))))
        for _ in range(data.draw(st.integers(1, 3))):
            payload = data.draw(mutated(payload))
        read_or_refuse(cls, back, to, payload)

    check()


def paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place inside a JSON value: the keys and indexes that lead to it."""
    inner = (value.items() if isinstance(value, dict)
             else enumerate(value) if isinstance(value, list) else ())
    return [at] + [p for key, child in inner for p in paths(child, (*at, key))]


def changed(value: Any, at: tuple[Any, ...], new: Any) -> Any:
    """``value`` with the place ``at`` set to ``new`` (or removed, for ``DROP``)."""
    if not at:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    if len(at) == 1 and new is DROP:
        del copy[at[0]]
    else:
        copy[at[0]] = changed(copy[at[0]], at[1:], new)
    return copy


DROP = object()


@pytest.mark.parametrize(("cls", "encode", "decode"), MESSAGE_TYPES, ids=IDS)
def test_every_place_dropped_or_swapped_is_refused_or_well_formed(cls: type, encode: str,
                                                                  decode: str) -> None:
    """Not left to chance: in messages that read back (there must be some: hypothesis fails
    the test when it finds none), every key and list item is dropped, and every place gets
    each of the NASTY values, one at a time."""
    to, back = codec(cls, encode, decode)

    def reads_back(message: Any) -> bool:
        try:
            return to(back(to(message))) == to(message)
        except MessageRefused:
            return False

    @settings(deadline=None, max_examples=4, database=None,
              suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
    @given(strategy_for(cls).filter(reads_back))
    def check(message: Any) -> None:
        full = json.loads(json.dumps(to(message)))
        for place in paths(full):
            for value in [DROP, *NASTY_VALUES] if place else NASTY_VALUES:
                read_or_refuse(cls, back, to, changed(full, place, value))

    check()


@pytest.mark.parametrize(("cls", "encode", "decode"), MESSAGE_TYPES, ids=IDS)
def test_foreign_payloads_are_refused(cls: type, encode: str, decode: str) -> None:
    """Any JSON at all, including objects that claim this memq's version."""
    to, back = codec(cls, encode, decode)
    claims_v1 = st.dictionaries(st.sampled_from(["v", "kind", "memory", "spec", "store",
                                                 "chunks", "vectors", "route", "options"]),
                                GARBAGE, max_size=6).map(lambda d: {**d, "v": 1})

    @RELAXED
    @given(st.one_of(GARBAGE, claims_v1))
    def check(payload: Any) -> None:
        read_or_refuse(cls, back, to, payload)

    check()


# -- what the refusals say --------------------------------------------------------------------

SPEC = {"name": "local", "model": "m", "provider_key": "k", "options": {}}


def embed_job(**changes: Any) -> dict[str, Any]:
    return {"v": 1, "kind": "embed", "memory": "main", "spec": SPEC, "store": "/s/main.sqlite",
            "chunks": [{"id": "c1", "hash": "h1", "text": "hello"}], "attempt": 0, **changes}


@pytest.mark.parametrize(("payload", "says"), [
    ({"v": 1}, "embedding job message must be of kind 'embed'"),
    ({"v": 1, "kind": "embed"}, "embedding job has no 'memory'"),
    ({"v": 2, "kind": "embed"}, "of version 2 (this memq reads version 1)"),
    ({"v": True, "kind": "embed"}, "of version True"),
    ("a string", "embedding job message must be a JSON object, not 'a string'"),
    (embed_job(memory="../other"), "embedding job.memory must be a memory name"),
    (embed_job(store="relative.sqlite"), "embedding job.store must be an absolute file path"),
    (embed_job(attempt=-1), "embedding job.attempt must be a whole number >= 0, not -1"),
    (embed_job(attempt=10**400), "a number too large"),
    (embed_job(spec={**SPEC, "options": {"x": math.nan}}),
     "embedding job.spec.options.x must be a finite number, not nan"),
    (embed_job(chunks=[{"id": "c1", "hash": "h1"}]), "embedding job.chunks[0] has no 'text'"),
    (embed_job(route={"shard": "0"}), "embedding job.route.shard must be a whole number"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_refusals_name_the_field(payload: Any, says: str) -> None:
    with pytest.raises(MessageRefused) as caught:
        EmbedJob.from_json(payload)
    assert says in str(caught.value)


def embed_result(vectors: list[Any]) -> dict[str, Any]:
    return {"v": 1, "kind": "result", "memory": "main", "spec": SPEC, "store": "/s/m.sqlite",
            "vectors": vectors, "failed": [], "held": []}


@pytest.mark.parametrize(("vector", "says"), [
    ("not base64!", "must be a base64 float32 vector"),
    (_b64(b"\x00" * 6), "must hold one or more float32 values (6 bytes)"),
    ("", "must hold one or more float32 values (0 bytes)"),
    (_b64(np.array([1.0, np.nan], dtype="<f4").tobytes()), "not a finite number"),
    (_b64(np.array([np.inf], dtype="<f4").tobytes()), "not a finite number"),
    ([0.1, 0.2], "must be a base64 float32 vector, not list"),
])
def test_broken_vector_encodings_are_refused(vector: Any, says: str) -> None:
    with pytest.raises(MessageRefused, match="vectors\\[0\\]\\[2\\]") as caught:
        EmbedResult.from_json(embed_result([["c1", "h1", vector]]))
    assert says in str(caught.value)


def test_vectors_of_one_result_share_one_width() -> None:
    two = _b64(np.ones(2, dtype="<f4").tobytes())
    three = _b64(np.ones(3, dtype="<f4").tobytes())
    with pytest.raises(MessageRefused, match=r"mixes vectors of widths \[2, 3\]"):
        EmbedResult.from_json(embed_result([["a", "h", two], ["b", "h", three]]))
    assert len(EmbedResult.from_json(embed_result([["a", "h", two], ["b", "h", two]])).vectors) == 2


@given(st.one_of(st.text(max_size=80),
                 st.from_regex(r"\s?[A-Za-z0-9][A-Za-z0-9_-]{0,70}\s?", fullmatch=True)))
def test_every_memory_name_the_config_takes_is_a_valid_message_name(raw: str) -> None:
    """Messages take the name of every memory a worker can serve: the canonical id of every
    agent id memq's loader accepts."""
    if is_valid_agent_id(raw):
        canonical = normalize_agent_id_strict(raw)
        assert canonical is not None
        assert EmbedJob.from_json(embed_job(memory=canonical)).memory == canonical
