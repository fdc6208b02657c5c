"""CPU model name and feature flags, for `--detail` only.

py-cpuinfo gives the most portable answer but is expensive: about 1.2 s, and it starts a
second Python, `lscpu`, `dmesg` and a CPUID child (docs/signals.md). It is therefore imported
inside `read_cpu_detail` and nowhere else: importing this module costs nothing, and no
default code path or sampling loop may call it (it would load the machine being measured).
"""

from __future__ import annotations

from dataclasses import dataclass

from oversub.probe.topology import describe_error, rooted

# Keys naming the model and the feature flags, x86 first, then ARM's spelling.
_MODEL_KEYS = ("model name", "Model", "Processor", "cpu model")
_FLAG_KEYS = ("flags", "Features")


@dataclass(frozen=True)
class CpuDetail:
    """Model name and feature flags of the host CPU."""

    model: str | None
    """Marketing name, e.g. "AMD EPYC 7B13"; None when not reported."""
    flags: tuple[str, ...]
    """Feature flags (avx2, sse4_2, ...), sorted; empty when not reported."""
    notes: tuple[str, ...] = ()
    """What could not be read."""


def parse_proc_cpuinfo(text: str) -> tuple[str | None, tuple[str, ...]]:
    """Model name and sorted flags of the first processor listed in a /proc/cpuinfo text."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # End of the first processor's block: the others repeat it.
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    model = next((fields[key] for key in _MODEL_KEYS if fields.get(key)), None)
    flags = next((fields[key].split() for key in _FLAG_KEYS if fields.get(key)), [])
    return model, tuple(sorted(set(flags)))


def _from_proc_cpuinfo(root: str, notes: list[str]) -> CpuDetail:
    path = rooted(root, "/proc/cpuinfo")
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            model, flags = parse_proc_cpuinfo(handle.read())
    except OSError as error:
        notes.append(f"cannot read {path}: {describe_error(error)}; CPU model unknown")
        return CpuDetail(model=None, flags=(), notes=tuple(notes))
    return CpuDetail(model=model, flags=flags, notes=tuple(notes))


def read_cpu_detail(root: str = "/") -> CpuDetail:
    """Model and flags of the host CPU. Slow (~1.2 s, spawns processes) on the real system.

    On the real system (`root="/"`) py-cpuinfo answers; when it is missing or fails,
    /proc/cpuinfo does (with a note). Under a fake `root`, only `<root>/proc/cpuinfo` is read,
    so tests never touch the host.
    """
    notes: list[str] = []
    if root != "/":
        return _from_proc_cpuinfo(root, notes)
    try:
        import cpuinfo  # py-cpuinfo: deliberately imported here only (slow, spawns processes)

        info = cpuinfo.get_cpu_info()
    except ImportError:
        notes.append("py-cpuinfo is not installed: CPU model read from /proc/cpuinfo")
        return _from_proc_cpuinfo(root, notes)
    except Exception as error:  # py-cpuinfo probes many tools; any of them may fail
        notes.append(f"py-cpuinfo failed ({error}): CPU model read from /proc/cpuinfo")
        return _from_proc_cpuinfo(root, notes)
    model = info.get("brand_raw") or None
    raw_flags = info.get("flags") or []
    return CpuDetail(
        model=str(model) if model is not None else None,
        flags=tuple(sorted({str(flag) for flag in raw_flags})),
        notes=tuple(notes),
    )
