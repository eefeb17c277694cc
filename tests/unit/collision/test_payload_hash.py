"""The canonical hashing helper: stable across key order and whitespace, raw bytes as is."""

from __future__ import annotations

import hashlib

import pytest

from sa_inbox.collision import canonical_json, payload_hash


def test_canonical_json_rules() -> None:
    assert canonical_json({"b": [1, 2.5], "a": "é"}) == '{"a":"é","b":[1,2.5]}'.encode()
    assert payload_hash({"a": 1, "b": 2}) == payload_hash({"b": 2, "a": 1})
    assert payload_hash({"a": 1}) != payload_hash({"a": 2})
    expected = hashlib.sha256(b'{"a":1,"b":{"c":null,"d":true}}').digest()
    assert payload_hash({"b": {"d": True, "c": None}, "a": 1}) == expected
    assert len(payload_hash("x")) == 32


def test_bytes_are_hashed_raw() -> None:
    body = b"\x00\xffnot json"
    assert payload_hash(body) == hashlib.sha256(body).digest()
    assert payload_hash(bytearray(body)) == payload_hash(memoryview(body))
    assert payload_hash("abc") == hashlib.sha256(b'"abc"').digest()


def test_non_json_values_are_refused() -> None:
    with pytest.raises(ValueError):
        payload_hash(float("nan"))
    with pytest.raises(TypeError):
        payload_hash({"a": object()})
