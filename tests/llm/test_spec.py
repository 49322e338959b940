"""from_spec / from_env: building a client from a short string or the environment."""

from __future__ import annotations

import pytest

from dagagent.errors import ConfigError
from dagagent.llm import AnthropicChat, ModelSettings, OpenAIChat, from_env, from_spec

ENV_VARS = [
    "DAGAGENT_MODEL",
    "DAGAGENT_BASE_URL",
    "OPENAI_BASE_URL",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)


def test_openai_spec() -> None:
    llm = from_spec("openai:gpt-4o-mini")
    assert isinstance(llm, OpenAIChat)
    assert llm.model == "gpt-4o-mini"
    assert llm.base_url == "https://api.openai.com/v1"
    assert not llm.has_api_key


def test_anthropic_spec_with_key_and_options() -> None:
    llm = from_spec(
        "Anthropic:claude-sonnet-4-5",
        api_key="sk-ant-xyz-123",
        settings=ModelSettings(max_tokens=1000, timeout=5),
    )
    assert isinstance(llm, AnthropicChat)
    assert llm.model == "claude-sonnet-4-5"
    assert llm.has_api_key and llm.max_tokens == 1000 and llm.timeout.read == 5
    assert "sk-ant-xyz-123" not in repr(llm)


def test_model_names_may_contain_colons_and_base_url_is_used() -> None:
    llm = from_spec("openai:llama3.1:8b", base_url="http://localhost:11434/v1")
    assert llm.model == "llama3.1:8b"
    assert llm.base_url == "http://localhost:11434/v1"


@pytest.mark.parametrize("spec", ["gpt-4o", "llama3.1:8b", "azure:gpt-4o", "", ":model", "openai"])
def test_bad_specs_list_the_accepted_forms(spec: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_spec(spec)
    text = str(info.value)
    assert "openai:MODEL" in text and "anthropic:MODEL" in text
    assert repr(spec) in text


def test_spec_without_model() -> None:
    with pytest.raises(ConfigError, match="names no model"):
        from_spec("anthropic:  ")


def test_from_env_reads_model_and_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAGAGENT_MODEL", "openai:qwen2.5")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-key-0001")
    llm = from_env()
    assert isinstance(llm, OpenAIChat)
    assert llm.model == "qwen2.5" and llm.base_url == "http://127.0.0.1:8000/v1"
    assert llm.has_api_key


def test_from_env_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAGAGENT_MODEL", "openai:from-env")
    monkeypatch.setenv("DAGAGENT_BASE_URL", "http://dagagent-url/v1")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://openai-url/v1")
    assert from_env().base_url == "http://dagagent-url/v1"
    llm = from_env("openai:explicit", base_url="http://explicit/v1")
    assert (llm.model, llm.base_url) == ("explicit", "http://explicit/v1")


def test_openai_base_url_does_not_apply_to_anthropic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://openai-url/v1")
    assert from_env("anthropic:claude").base_url == "https://api.anthropic.com"
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://proxy")
    assert from_env("anthropic:claude").base_url == "http://proxy"


def test_from_env_without_a_model() -> None:
    with pytest.raises(ConfigError, match="DAGAGENT_MODEL"):
        from_env()


def test_from_env_bad_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAGAGENT_MODEL", "gpt-4o")
    with pytest.raises(ConfigError, match="openai:MODEL"):
        from_env()
