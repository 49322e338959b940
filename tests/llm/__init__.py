"""Tests of ``dagagent.llm``."""
