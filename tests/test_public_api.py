from __future__ import annotations

import os

import agent_memory
from agent_memory import errors


def test_all_is_complete_and_importable() -> None:
    for name in agent_memory.__all__:
        assert hasattr(agent_memory, name), name
    exported_errors = {
        n
        for n in agent_memory.__all__
        if isinstance(getattr(agent_memory, n), type) and issubclass(getattr(agent_memory, n), Exception)
    }
    defined = {
        n
        for n, v in vars(errors).items()
        if isinstance(v, type) and issubclass(v, Exception) and v.__module__ == errors.__name__
    }
    assert defined == exported_errors


def test_every_error_is_an_agent_memory_error() -> None:
    for name in agent_memory.__all__:
        value = getattr(agent_memory, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, agent_memory.AgentMemoryError), name


def test_offline_defaults_are_set_on_import() -> None:
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "LITELLM_LOCAL_MODEL_COST_MAP"):
        assert os.environ.get(key), key


def test_litellm_is_not_imported_eagerly() -> None:
    import subprocess
    import sys

    code = "import sys, agent_memory; print('litellm' in sys.modules, 'torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "False"], done.stderr
