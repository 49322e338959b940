"""ModelSettings: the one object for how a client calls a model."""

from __future__ import annotations

import httpx
import pytest

from dagagent.llm import (
    HTTPRetryPolicy,
    ModelSettings,
    OpenAIChat,
    ScriptedLLM,
    UserMessage,
    wire,
)


def test_a_client_takes_its_settings_from_one_object() -> None:
    settings = ModelSettings(
        max_tokens=77,
        temperature=0.25,
        timeout=12.0,
        retry=HTTPRetryPolicy(max_retries=5, base_delay_s=0.0),
        max_response_bytes=1000,
        extra_body={"seed": 1},
    )
    llm = OpenAIChat("m", base_url="http://127.0.0.1:1/v1", settings=settings)
    assert llm.settings is settings
    assert (llm.max_tokens, llm.temperature, llm.extra_body) == (77, 0.25, {"seed": 1})
    assert llm.timeout == httpx.Timeout(12.0)
    assert llm.retry.max_retries == 5 and llm.max_response_bytes == 1000


@pytest.mark.anyio
async def test_the_settings_reach_the_request_body() -> None:
    async with ScriptedLLM.openai(
        [wire.openai_text("ok")], settings=ModelSettings(max_tokens=9, temperature=0.1)
    ) as llm:
        await llm.complete([UserMessage("hi")])
    body = llm.wire_requests[0]
    assert (body["max_tokens"], body["temperature"]) == (9, 0.1)
