"""The LLM boundary: one litellm client, and the save-decision prompt built on it.

Nothing here imports litellm until the first call; with no model configured no call is ever made.
"""

from __future__ import annotations

from agent_memory.llm.client import LiteLLMClient, extract_json_object, parse_json
from agent_memory.llm.prompts import JudgedTurn, SaveVerdict, SaveVerdicts, judge_turns, save_prompt

__all__ = [
    "JudgedTurn",
    "LiteLLMClient",
    "SaveVerdict",
    "SaveVerdicts",
    "extract_json_object",
    "judge_turns",
    "parse_json",
    "save_prompt",
]
