"""The child side of `oversub doctor`: one operation per check, a standard-library-only
script an old interpreter can run, and the ONNX model it encodes by hand."""

from __future__ import annotations

import ast
import struct
import sys
from pathlib import Path

from oversub.core.checkups import CHECKUPS
from oversub.probe import poolstart

SOURCE = Path(poolstart.__file__).read_text("utf-8")


def test_every_check_has_its_operation() -> None:
    assert set(poolstart.OPERATIONS) == {c.key for c in CHECKUPS}


def test_the_child_imports_the_standard_library_only() -> None:
    # It runs in the interpreter under test, which may not have oversub (or anything).
    tree = ast.parse(SOURCE)
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        assert all(n.split(".")[0] in stdlib for n in names), names


def test_the_child_parses_as_python_3_8() -> None:
    ast.parse(SOURCE, feature_version=(3, 8))


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """A protobuf message's (field number, value) pairs: varints and length-delimited."""
    out: list[tuple[int, int | bytes]] = []
    at = 0

    def varint() -> int:
        nonlocal at
        shift = value = 0
        while True:
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while at < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            out.append((number, varint()))
        else:
            assert wire == 2, wire
            size = varint()
            out.append((number, data[at : at + size]))
            at += size
    return out


def _one(fields: list[tuple[int, int | bytes]], number: int) -> int | bytes:
    found = [v for n, v in fields if n == number]
    assert len(found) == 1, (number, found)
    return found[0]


def test_the_onnx_model_is_a_matmul_with_its_weights() -> None:
    model = _fields(poolstart.onnx_matmul_model(side=4))
    assert _one(model, 1) == 8  # ir_version
    opset = _fields(_one(model, 8))  # type: ignore[arg-type]
    assert _one(opset, 2) == 13
    graph = _fields(_one(model, 7))  # type: ignore[arg-type]
    node = _fields(_one(graph, 1))  # type: ignore[arg-type]
    assert [v for n, v in node if n == 1] == [b"X", b"W"]
    assert (_one(node, 2), _one(node, 4)) == (b"Y", b"MatMul")
    weights = _fields(_one(graph, 5))  # type: ignore[arg-type]
    assert [v for n, v in weights if n == 1] == [4, 4] and _one(weights, 2) == 1
    assert _one(weights, 9) == struct.pack("<16f", *([0.001] * 16))
    for number, name in ((11, b"X"), (12, b"Y")):
        value = _fields(_one(graph, number))  # type: ignore[arg-type]
        assert _one(value, 1) == name
        tensor = _fields(_one(_fields(_one(value, 2)), 1))  # type: ignore[arg-type]
        assert _one(tensor, 1) == 1  # FLOAT
        dims = [_fields(v) for n, v in _fields(_one(tensor, 2)) if n == 1]  # type: ignore[arg-type]
        assert dims == [[(2, b"n")], [(1, 4)]]
