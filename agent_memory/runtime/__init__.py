"""The agent loop: one chat turn (agent.py) and the short-term window it keeps (window.py).

Import-light on purpose: importing this package loads no engine, model or litellm. Import the names from their
modules (`from agent_memory.runtime.window import Window`).
"""
