from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from agent_memory.config import Config, load_config
from agent_memory.errors import ConfigError
from agent_memory.project import project_root

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TOML = ROOT / "config" / "default.toml"


def _flatten(data: dict, prefix: str = "") -> dict[str, object]:
    flat: dict[str, object] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def test_default_toml_lists_every_key_with_the_model_default() -> None:
    text = DEFAULT_TOML.read_text()
    documented = _flatten(tomllib.loads(text))
    defaults = _flatten(Config().model_dump(mode="json"))
    del defaults["data_dir"]  # found from the current directory (project.py), so listed as a comment only
    assert documented == defaults
    assert '\n# data_dir = "~/.agent_memory"\n' in text


def test_every_key_is_documented_in_docs_config() -> None:
    text = (ROOT / "docs" / "config.md").read_text()
    missing = [key for key in _flatten(Config().model_dump(mode="json")) if f"`{key}`" not in text]
    assert not missing


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    config = load_config(
        DEFAULT_TOML, environ={"AGENT_MEMORY__JOURNAL__FSYNC": "never", "AGENT_MEMORY__RETRIEVAL__RRF_K": "10"}
    )
    assert config.journal.fsync == "never" and config.retrieval.rrf_k == 10
    pinned = tmp_path / "pinned.toml"
    pinned.write_text('data_dir = "~/.agent_memory"\n[journal]\nfsync = "always"\n')
    config = load_config(pinned, environ={"AGENT_MEMORY__JOURNAL__FSYNC": "never"})
    assert config.journal.fsync == "never" and config.data_dir == Path("~/.agent_memory").expanduser()


def test_the_default_data_dir_is_under_home_not_a_literal_tilde(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # in no git repository: the checkout would give its own project store
    assert project_root(tmp_path) is None
    for config in (Config(), load_config(environ={}), load_config(DEFAULT_TOML, environ={})):
        assert config.data_dir == Path.home() / ".agent_memory"
        assert "~" not in str(config.data_dir)


def test_bad_values_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="journal.fsync"):
        load_config(environ={"AGENT_MEMORY__JOURNAL__FSYNC": "sometimes"})
    with pytest.raises(ConfigError, match="retrieval.wat"):
        load_config(environ={"AGENT_MEMORY__RETRIEVAL__WAT": "1"})
    for interval in ("-PT0.001S", "PT2S"):  # a negative switch interval, or one that would stall every thread
        with pytest.raises(ConfigError, match="serve.switch_interval"):
            load_config(environ={"AGENT_MEMORY__SERVE__SWITCH_INTERVAL": interval})
    with pytest.raises(ConfigError, match="extraction.refresh_delay"):  # a negative wait would spin the idle loop
        load_config(environ={"AGENT_MEMORY__EXTRACTION__REFRESH_DELAY": "-PT1S"})
    with pytest.raises(ConfigError, match="extraction.refresh_batch"):
        load_config(environ={"AGENT_MEMORY__EXTRACTION__REFRESH_BATCH": "0"})
    for share in ("1.5", "-0.1", "much"):  # a share of the score: 0 to 1
        with pytest.raises(ConfigError, match="retrieval.time_penalty_after"):
            load_config(environ={"AGENT_MEMORY__RETRIEVAL__TIME_PENALTY_AFTER": share})
    assert load_config(environ={"AGENT_MEMORY__RETRIEVAL__TIME_PENALTY_AFTER": "1"}).retrieval.time_penalty_after == 1.0
    broken = tmp_path / "bad.toml"
    broken.write_text("data_dir = [unclosed")
    with pytest.raises(ConfigError, match="bad.toml"):
        load_config(broken, environ={})


def test_an_empty_data_dir_is_refused_not_the_current_directory() -> None:
    with pytest.raises(ConfigError, match="data_dir: .*must not be empty"):
        load_config(environ={"AGENT_MEMORY__DATA_DIR": " "})
