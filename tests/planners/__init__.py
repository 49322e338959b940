"""Tests of ``dagagent.planners``."""
