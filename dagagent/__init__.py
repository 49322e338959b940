"""dagagent: plan-and-execute DAG orchestration for LLM agents."""

__version__ = "0.1.0"
