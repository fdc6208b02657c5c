"""The child side of `oversub doctor`: start one runtime's pool and stop where it is counted.

Run by the interpreter under test (`doctor --python PATH`), which may not have oversub: the
parent passes this file's source to `PYTHON -c` with one JSON argument, so it imports the
standard library only and keeps to syntax Python 3.8 runs. It never counts its own threads:
the parent reads them from outside, in `/proc/PID/task`, at each stop (`oversub.run.doctoring`).

A check (the argument's "module", "needs", "dists", "op") goes:

1. imports the modules it needs first, those installed ("needs": NumPy for numexpr, and
   for pyarrow, which imports it when it is there), so their pools are there before the
   count starts; stop "base";
2. imports the runtime; stop "imported" (the threads its import started);
3. runs its operation once (`OPERATIONS`: a matmul, a group-by, an inference, ...); stop
   "ran" with what the library says of its own size, where it has a call for that;
4. with "busy" > 0: stop "busy", then runs the operation in a loop for that many seconds
   and stops at "idle" (the parent reads which threads worked in between).

Each stop is one JSON line on the "report" descriptor; the parent answers with a line on
the "go" descriptor (end of file: the parent is gone, and the child exits at once). A
failure is a stop "error" with where it happened and the exception in one line. With
"op" = "inventory", nothing is imported: one stop "inventory" says which of "checks" are
installed (`importlib.util.find_spec`) and their versions (`importlib.metadata`).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import struct
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: nothing here runs in the child
    from collections.abc import Callable

    Operation = tuple[Callable[[], object], Callable[[], dict[str, object]]]

MESSAGE_MAX = 300
"""Characters of an exception message kept (the parent bounds and escapes it again)."""


class _Stop(Exception):
    """The parent closed the "go" pipe: exit without a word."""


class _Channel:
    def __init__(self, report: int, go: int) -> None:
        self._out = os.fdopen(report, "w", encoding="utf-8")
        self._in = os.fdopen(go, "r", encoding="utf-8")

    def stop(self, stage: str, **extra: object) -> None:
        message = dict(extra)
        message["stage"] = stage
        self._out.write(json.dumps(message, default=str) + "\n")
        self._out.flush()
        if not self._in.readline():
            raise _Stop


def _describe(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}"[:MESSAGE_MAX]


def _version(dists: list[str], module: object = None) -> str | None:
    try:
        from importlib import metadata
    except ImportError:  # Python 3.7
        metadata = None  # type: ignore[assignment]
    if metadata is not None:
        for dist in dists:
            try:
                return str(metadata.version(dist))
            except Exception:
                continue
    found = getattr(module, "__version__", None)
    return found if isinstance(found, str) else None


# --------------------------------------------------------------------------- operations
# Each takes the imported module and returns (step, report): `step()` runs the operation
# once, `report()` says what the library says of its own size ({call: value}). The
# packages are imported by name (`_use`): the child has whatever the environment has.


def _use(name: str) -> Any:
    return importlib.import_module(name)


def _nothing() -> dict[str, object]:
    return {}


def _blas_report() -> dict[str, object]:
    """threadpoolctl's view of the BLAS and OpenMP pools loaded, where it is installed."""
    try:
        info = _use("threadpoolctl").threadpool_info()
    except Exception:
        return {}
    out: dict[str, object] = {}
    for pool in info:
        where = os.path.basename(str(pool.get("filepath", "")))
        out[f"threadpoolctl {pool.get('internal_api')} {where}"] = pool.get("num_threads")
    return out


def _numpy(np: Any) -> Operation:
    a = np.ones((512, 512))

    def step() -> object:
        return a @ a

    return step, _blas_report


def _scipy(linalg: Any) -> Operation:
    a = _use("numpy").random.default_rng(0).random((512, 512))

    def step() -> object:
        return linalg.lu_factor(a)

    return step, _blas_report


def _torch(torch: Any) -> Operation:
    x = torch.ones(512, 512)

    def step() -> object:
        return torch.mm(x, x)

    def report() -> dict[str, object]:
        return {
            "torch.get_num_threads()": torch.get_num_threads(),
            "torch.get_num_interop_threads()": torch.get_num_interop_threads(),
        }

    return step, report


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, value: int | str | bytes) -> bytes:
    """One protobuf field: an int (varint) or bytes/str (length-delimited)."""
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def onnx_matmul_model(side: int = 256) -> bytes:
    """An ONNX model Y = X @ W (X: [n, side] float, W: side x side), encoded by hand: the
    `onnx` package is not needed to run ONNX Runtime, and may not be installed."""
    weights = struct.pack(f"<{side * side}f", *([0.001] * (side * side)))
    tensor = _field(1, side) + _field(1, side) + _field(2, 1) + _field(8, "W") + _field(9, weights)
    shape = _field(1, _field(2, "n")) + _field(1, _field(1, side))
    value_type = _field(1, _field(1, 1) + _field(2, shape))  # tensor_type: elem FLOAT, shape
    node = _field(1, "X") + _field(1, "W") + _field(2, "Y") + _field(4, "MatMul")
    graph = (
        _field(1, node)
        + _field(2, "mm")
        + _field(5, tensor)
        + _field(11, _field(1, "X") + _field(2, value_type))
        + _field(12, _field(1, "Y") + _field(2, value_type))
    )
    opset = _field(1, "") + _field(2, 13)
    return _field(1, 8) + _field(7, graph) + _field(8, opset)


def _onnxruntime(ort: Any) -> Operation:
    np = _use("numpy")
    session = ort.InferenceSession(onnx_matmul_model(), providers=["CPUExecutionProvider"])
    feed = {"X": np.ones((512, 256), dtype=np.float32)}

    def step() -> object:
        return session.run(None, feed)

    return step, _nothing


def _polars(pl: Any) -> Operation:
    df = pl.DataFrame({"k": list(range(200_000))})
    group_by = getattr(df, "group_by", None) or df.groupby  # before polars 0.19: groupby
    key = pl.col("k") % 7

    def step() -> object:
        group_by(key).agg(pl.col("k").sum().alias("s"))
        return df.sort("k", descending=True)

    def report() -> dict[str, object]:
        size = getattr(pl, "thread_pool_size", None)
        return {"polars.thread_pool_size()": size()} if size is not None else {}

    return step, report


def _pyarrow(pa: Any) -> Operation:
    table = pa.table({"k": [i % 100 for i in range(200_000)], "v": list(range(200_000))})

    def step() -> object:
        return table.group_by("k").aggregate([("v", "sum")])

    def report() -> dict[str, object]:
        return {"pyarrow.cpu_count()": pa.cpu_count()}

    return step, report


def _numexpr(ne: Any) -> Operation:
    a = _use("numpy").linspace(0.0, 1.0, 1_000_000)

    def step() -> object:
        return ne.evaluate("sin(a) * cos(a) + a", local_dict={"a": a})

    def report() -> dict[str, object]:
        return {"numexpr.nthreads": getattr(ne, "nthreads", None)}

    return step, report


def _numba(numba: Any) -> Operation:
    prange = numba.prange

    def loop(x: Any) -> float:
        total = 0.0
        for i in prange(x.shape[0]):
            total += x[i] * x[i]
        return total

    kernel = numba.njit(parallel=True, cache=False)(loop)
    x = _use("numpy").linspace(0.0, 1.0, 1_000_000)

    def step() -> object:
        return kernel(x)

    def report() -> dict[str, object]:
        out: dict[str, object] = {"numba.get_num_threads()": numba.get_num_threads()}
        with contextlib.suppress(Exception):  # no parallel region ran yet: nothing to say
            out["numba.threading_layer()"] = numba.threading_layer()
        return out

    return step, report


def _sklearn(sklearn: Any) -> Operation:
    kmeans = _use("sklearn.cluster").KMeans
    points = _use("numpy").random.default_rng(0).random((20_000, 10))

    def step() -> object:
        return kmeans(n_clusters=4, n_init=1, random_state=0).fit(points)

    def report() -> dict[str, object]:
        try:  # private, but the very number scikit-learn gives its OpenMP loops
            helpers = _use("sklearn.utils._openmp_helpers")
            return {"sklearn _openmp_effective_n_threads()": helpers._openmp_effective_n_threads()}
        except Exception:
            return {}

    return step, report


def _duckdb(duckdb: Any) -> Operation:
    con = duckdb.connect()
    query = "SELECT k % 7, sum(k) FROM range(2000000) t(k) GROUP BY 1"

    def step() -> object:
        return con.execute(query).fetchall()

    def report() -> dict[str, object]:
        threads = con.execute("SELECT current_setting('threads')").fetchone()[0]
        return {"current_setting('threads')": threads}

    return step, report


def _cv2(cv2: Any) -> Operation:
    np = _use("numpy")
    image = np.zeros((1024, 1024, 3), dtype=np.uint8)

    def step() -> object:
        return cv2.GaussianBlur(image, (9, 9), 0)

    def report() -> dict[str, object]:
        return {"cv2.getNumThreads()": cv2.getNumThreads()}

    return step, report


def _xgboost(xgb: Any) -> Operation:
    rng = _use("numpy").random.default_rng(0)
    data = xgb.DMatrix(rng.random((20_000, 10)), label=rng.random(20_000))

    def step() -> object:
        return xgb.train({"tree_method": "hist", "max_depth": 4}, data, 2)

    return step, _nothing


def _lightgbm(lgb: Any) -> Operation:
    rng = _use("numpy").random.default_rng(0)
    features, label = rng.random((20_000, 10)), rng.random(20_000)

    def step() -> object:
        data = lgb.Dataset(features, label=label, params={"verbose": -1})
        return lgb.train({"verbose": -1, "num_leaves": 15}, data, 2)

    return step, _nothing


OPERATIONS: dict[str, Callable[[Any], Operation]] = {
    "numpy": _numpy,
    "scipy": _scipy,
    "torch": _torch,
    "onnxruntime": _onnxruntime,
    "polars": _polars,
    "pyarrow": _pyarrow,
    "numexpr": _numexpr,
    "numba": _numba,
    "scikit-learn": _sklearn,
    "duckdb": _duckdb,
    "opencv": _cv2,
    "xgboost": _xgboost,
    "lightgbm": _lightgbm,
}
"""Check key (`oversub.core.checkups.CHECKUPS`) -> its operation."""


# --------------------------------------------------------------------------- the check


def _inventory(spec: dict[str, Any], channel: _Channel) -> None:
    found: dict[str, object] = {}
    for check in spec["checks"]:
        top = str(check["module"]).split(".")[0]
        try:
            present = importlib.util.find_spec(top) is not None
        except Exception:  # a broken package: say it is there, its import will say the rest
            present = True
        found[str(check["key"])] = _version(list(check["dists"])) if present else False
    channel.stop(
        "inventory",
        found=found,
        python=sys.version.split()[0],
        executable=sys.executable,
        prefix=sys.prefix,
    )


def _check(spec: dict[str, Any], channel: _Channel) -> None:
    seen: dict[str, object] = {"os.cpu_count()": os.cpu_count()}
    if hasattr(os, "sched_getaffinity"):
        seen["len(os.sched_getaffinity(0))"] = len(os.sched_getaffinity(0))
    try:
        for name in spec["needs"]:  # those installed: pyarrow runs without NumPy
            if importlib.util.find_spec(str(name).split(".")[0]) is not None:
                importlib.import_module(str(name))
    except BaseException as error:  # any failure, even SystemExit at import, is the answer
        channel.stop("error", where="needs", error=_describe(error))
        return
    channel.stop("base", seen=seen)
    try:
        module = importlib.import_module(str(spec["module"]))
    except BaseException as error:
        channel.stop("error", where="import", error=_describe(error))
        return
    channel.stop("imported", version=_version(list(spec["dists"]), module))
    try:
        step, report = OPERATIONS[str(spec["op"])](module)
        step()
        said = report()
    except BaseException as error:
        channel.stop("error", where="operation", error=_describe(error))
        return
    channel.stop("ran", reported=said)
    busy = float(spec.get("busy", 0.0))
    if busy <= 0:
        return
    channel.stop("busy")
    steps, deadline = 0, time.monotonic() + busy
    while time.monotonic() < deadline:
        step()
        steps += 1
    channel.stop("idle", steps=steps)


def main(argv: list[str]) -> None:
    spec = json.loads(argv[1])
    channel = _Channel(int(spec["report"]), int(spec["go"]))
    try:
        if spec["op"] == "inventory":
            _inventory(spec, channel)
        else:
            _check(spec, channel)
    except _Stop:
        pass
    # No interpreter teardown: a runtime's threads may hang or crash in it, and the parent
    # has what it wanted.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
