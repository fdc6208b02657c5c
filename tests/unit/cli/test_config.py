"""`[tool.oversub]` loading and validation, and thresholds from defaults/config/flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from oversub.cli.config import load_config, resolve, thresholds_from
from oversub.core.errors import ExitStatus, UsageError
from oversub.core.settings import BY_KEY, BY_NAME
from oversub.core.thresholds import Thresholds

KEYS = list(BY_KEY)
FAIL_ON_CHOICES = BY_KEY["fail-on"].choices


def write(tmp_path: Path, body: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(body, encoding="utf-8")
    return tmp_path


# key -> (values that must load, values that must be refused), as TOML literals.
CASES: dict[str, tuple[list[str], list[str]]] = {
    "margin": (["0", "0.15", "2"], ["-0.01", '"0.1"', "true", "inf", "nan"]),
    "delay-ratio": (["0", "0.5", "1", "1.0"], ["-0.1", "1.01", "[0.1]"]),
    "active-cpu": (["0.01", "1", "0.2"], ["0", "0.0", "1.5", "-1"]),
    "throttle-ratio": (["0", "0.1", "1"], ["1.1", "-0.5", "false"]),
    "outside-cpu": (["0", "0.5", "16"], ["-0.5", "-inf", '"half"']),
    "idle-seconds": (["0.5", "3", "600"], ["0", "-3", "{ a = 1 }"]),
    "min-wait": (["0", "0.05", "2"], ["-0.01", "nan", "inf", "true"]),
    "episode-share": (["0.01", "0.1", "1"], ["0", "1.5", "-0.1", "nan", '"10%"']),
    "episode-seconds": (["0", "3", "60"], ["-1", "inf", "false"]),
    "long-episode": (["0.5", "30", "86400"], ["0", "-30", "nan", "[30]"]),
    "fail-on": (
        ['"costly"', '"oversubscribed"', '"starved"', '"at-risk"'],
        ['"ok"', '"AT-RISK"', "1", '"critical"', '"Costly"'],
    ),
    # Below 0.1 s oversub's own sampling becomes a CPU hog on a large tree.
    "interval": (["0.1", "1", "2.5"], ["0", "-1", '"1s"', "0.05", "0.099", "nan", "inf"]),
    "warmup": (["0", "2", "0.5"], ["-0.1", "true"]),
    "timeout": (["1", "0.5", "3600"], ["0", "-10", "nan"]),
    "record-max-mb": (["0.1", "50", "2000"], ["0", "0.05", "-1", "nan", '"50MB"']),
}


def test_cases_cover_every_key() -> None:
    assert set(CASES) == set(KEYS)


def test_keys_document_every_threshold() -> None:
    threshold_keys = {name.replace("_", "-") for name in Thresholds._fields}
    assert threshold_keys <= set(KEYS)


@pytest.mark.parametrize(
    ("key", "literal"), [(k, v) for k, (good, _) in CASES.items() for v in good]
)
def test_valid_value_loads(tmp_path: Path, key: str, literal: str) -> None:
    config = load_config(write(tmp_path, f"[tool.oversub]\n{key} = {literal}\n"))
    assert list(config) == [key]
    if key == "fail-on":
        assert config[key] == literal.strip('"')
        assert config[key] in FAIL_ON_CHOICES
    else:
        value = config[key]
        assert isinstance(value, float)
        assert value == float(literal)


@pytest.mark.parametrize(("key", "literal"), [(k, v) for k, (_, bad) in CASES.items() for v in bad])
def test_invalid_value_is_usage_error(tmp_path: Path, key: str, literal: str) -> None:
    with pytest.raises(UsageError) as caught:
        load_config(write(tmp_path, f"[tool.oversub]\n{key} = {literal}\n"))
    message = str(caught.value)
    assert key in message
    assert "got" in message
    assert caught.value.status is ExitStatus.USAGE


def test_unknown_key_names_it_and_lists_known(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as caught:
        load_config(write(tmp_path, "[tool.oversub]\nmargin = 0.2\ndelay_ratio = 0.1\n"))
    message = str(caught.value)
    assert "unknown key 'delay_ratio'" in message
    assert "pyproject.toml [tool.oversub]" in message
    for key in KEYS:
        assert key in message


def test_invalid_toml_carries_parser_message(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as caught:
        load_config(write(tmp_path, "[tool.oversub]\nmargin = = 0.2\n"))
    message = str(caught.value)
    assert "invalid TOML" in message
    assert "line 2" in message  # tomllib's own position report


def test_missing_file_is_empty(tmp_path: Path) -> None:
    assert load_config(tmp_path) == {}


def test_file_without_table_is_empty(tmp_path: Path) -> None:
    body = '[project]\nname = "x"\n[tool.ruff]\nline-length = 100\n'
    assert load_config(write(tmp_path, body)) == {}


def test_table_of_wrong_type_is_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="must be a table"):
        load_config(write(tmp_path, "[tool]\noversub = 3\n"))


def test_unreadable_file_is_usage_error(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").mkdir()
    with pytest.raises(UsageError, match="cannot read"):
        load_config(tmp_path)


def test_whole_table_loads(tmp_path: Path) -> None:
    body = """
[tool.oversub]
margin = 0.2
delay-ratio = 0.3
active-cpu = 0.4
throttle-ratio = 0.05
outside-cpu = 1
idle-seconds = 5
min-wait = 0.2
fail-on = "starved"
interval = 0.5
warmup = 1
timeout = 30
"""
    config = load_config(write(tmp_path, body))
    assert config == {
        "margin": 0.2,
        "delay-ratio": 0.3,
        "active-cpu": 0.4,
        "throttle-ratio": 0.05,
        "outside-cpu": 1.0,
        "idle-seconds": 5.0,
        "min-wait": 0.2,
        "fail-on": "starved",
        "interval": 0.5,
        "warmup": 1.0,
        "timeout": 30.0,
    }


def test_thresholds_defaults_without_config_or_flags() -> None:
    assert thresholds_from({}, {}) == Thresholds()


def test_thresholds_config_over_defaults_flags_over_config() -> None:
    config = {"margin": 0.3, "delay-ratio": 0.2, "interval": 0.5, "fail-on": "at-risk"}
    result = thresholds_from(config, {"delay_ratio": 0.05, "margin": None, "outside_cpu": 2.0})
    assert result.margin == 0.3  # config; the flag was not given
    assert result.delay_ratio == 0.05  # flag beats config
    assert result.outside_cpu == 2.0  # flag beats default
    assert result.active_cpu == Thresholds().active_cpu  # neither: default
    assert result.idle_seconds == Thresholds().idle_seconds


def test_min_wait_from_config_and_flag() -> None:
    assert thresholds_from({"min-wait": 0.3}, {}).min_wait == 0.3
    assert thresholds_from({"min-wait": 0.3}, {"min_wait": 0.0}).min_wait == 0.0
    with pytest.raises(UsageError, match="--min-wait must be >= 0"):
        thresholds_from({}, {"min_wait": -1.0})


def test_resolve_takes_the_flag_then_the_key_then_the_default() -> None:
    # Issue 13 item 1: one resolver for every setting.
    assert resolve("interval", 0.5, {"interval": 2.0}) == 0.5
    assert resolve("interval", None, {"interval": 2.0}) == 2.0
    assert resolve("interval", None, {}) == BY_NAME["interval"].default == 1.0
    assert resolve("timeout", None, {}) is None
    assert resolve("fail_on", None, {"fail-on": "starved"}) == "starved"


def test_thresholds_flag_out_of_range_names_flag() -> None:
    with pytest.raises(UsageError, match=r"--delay-ratio must be in \[0, 1\], got 1\.5"):
        thresholds_from({}, {"delay_ratio": 1.5})


def test_thresholds_config_not_from_load_config_is_checked() -> None:
    with pytest.raises(UsageError, match="active-cpu"):
        thresholds_from({"active-cpu": 0}, {})


def test_thresholds_unknown_override_is_a_bug() -> None:
    with pytest.raises(ValueError, match="unknown threshold 'interval'"):
        thresholds_from({}, {"interval": 1.0})
