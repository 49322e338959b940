"""Watching model calls (``MeteredLLM(observer=...)``, ``LiveCall``): every call heard as it
starts, as it writes and as it ends, however it ends; tokens reported or estimated (never 0
for a call that wrote something, never what a lying server says); an observer that refuses
or cuts a call; a reader that rejects an answer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import httpx
import pytest
from llm_server import OPENAI, LLMTestServer, SSEReply

from dagagent.errors import BudgetExceededError, LLMResponseError
from dagagent.llm import (
    LiveCall,
    LLMRequest,
    LLMResponse,
    MeteredLLM,
    ScriptedLLM,
    TextDelta,
    Usage,
    ask_streamed,
    estimate_tokens,
    last_call,
    reject_last_call,
    wire,
)

pytestmark = pytest.mark.anyio


class Heard:
    """An observer that keeps what it hears; ``refuse`` / ``cut_after`` make it refuse a call
    or cut it once it wrote that many characters."""

    def __init__(self, *, refuse: bool = False, cut_after: int | None = None) -> None:
        self.refuse = refuse
        self.cut_after = cut_after
        self.events: list[tuple[str, str]] = []
        self.calls: list[LiveCall] = []
        self.issues: list[Sequence[str]] = []

    def started(self, call: LiveCall) -> None:
        self.events.append(("started", call.id))
        if self.refuse:
            raise BudgetExceededError("no budget left", what="tokens")

    def wrote(self, call: LiveCall) -> None:
        self.events.append(("wrote", call.id))
        if self.cut_after is not None and call.chars >= self.cut_after:
            raise BudgetExceededError("wrote too much", what="tokens")

    def ended(self, call: LiveCall) -> None:
        self.events.append(("ended", call.id))
        self.calls.append(call)

    def rejected(self, call: LiveCall, issues: Sequence[str]) -> None:
        self.issues.append(list(issues))


async def test_a_streamed_call_is_heard_as_it_writes_and_when_it_ends() -> None:
    heard = Heard()
    llm = MeteredLLM(ScriptedLLM(["The answer is 42, of course."], chunk_size=5), observer=heard)
    response = await ask_streamed(llm, "question?", max_tokens=50, temperature=0.2)
    assert response.content == "The answer is 42, of course."
    (call,) = heard.calls
    kinds = [k for k, _ in heard.events]
    assert kinds[0] == "started" and kinds[-1] == "ended" and kinds.count("wrote") >= 6
    assert call.outcome == "answered" and call.text == response.content
    assert call.options == {"max_tokens": 50, "temperature": 0.2, "stream": True}
    assert call.first_token_s is not None and call.duration_s is not None
    assert call.first_token_s <= call.duration_s
    # the scripted model reports no usage: estimated from what was sent and written
    assert call.estimated and call.usage.calls == 1
    assert call.usage.output_tokens == estimate_tokens(len(response.content)) > 0
    assert call.usage.input_tokens == call.prompt_tokens > 0
    assert llm.usage.total.calls == 1 and llm.usage.total.estimated


async def test_reported_usage_is_taken_when_it_can_be_true() -> None:
    heard = Heard()
    body = wire.openai_text("x" * 40, input_tokens=120, output_tokens=11)
    llm = MeteredLLM(ScriptedLLM.openai([body]), observer=heard)
    async with llm.llm:
        await ask_streamed(llm, "q")
    (call,) = heard.calls
    assert call.usage == Usage(input_tokens=120, output_tokens=11, calls=1)
    assert not call.estimated


@pytest.mark.parametrize("output_tokens", [0, 1])
async def test_a_server_lying_about_usage_is_not_believed(output_tokens: int) -> None:
    heard = Heard()
    text = "word " * 400  # 2,000 characters: hundreds of tokens, whatever the tokenizer
    body = wire.openai_text(text, input_tokens=3, output_tokens=output_tokens)
    llm = MeteredLLM(ScriptedLLM.openai([body]), observer=heard)
    async with llm.llm:
        await ask_streamed(llm, "q")
    (call,) = heard.calls
    assert call.estimated
    assert call.usage.output_tokens == estimate_tokens(len(text)) == 500
    assert call.usage.input_tokens == 3  # a small prompt may well be 3 tokens


async def test_a_stream_cut_off_by_the_server_counts_what_came() -> None:
    heard = Heard()
    body = wire.openai_text("a long answer " * 20)
    with LLMTestServer() as server:
        server.push(SSEReply(wire.openai_events(body, chunk_size=10), cut_after=8))
        client = OPENAI.client(server)
        llm = MeteredLLM(client, observer=heard)
        with pytest.raises(LLMResponseError, match="ended early"):
            await ask_streamed(llm, "q")
    (call,) = heard.calls
    assert call.outcome == "failed" and isinstance(call.error, LLMResponseError)
    assert call.chars > 0 and call.text == "a long answer " * 5  # what came before the cut
    assert call.estimated and call.usage.output_tokens == estimate_tokens(call.chars) > 0
    assert call.server == server.url + "/v1"


async def test_a_reader_that_stops_reading_cuts_the_call() -> None:
    heard = Heard()
    llm = MeteredLLM(ScriptedLLM(["0123456789" * 10], chunk_size=10), observer=heard)
    events = llm.stream("q")
    async for _ in events:
        break
    await events.aclose()
    (call,) = heard.calls
    assert call.outcome == "cut" and call.chars == 10
    assert call.usage.output_tokens == estimate_tokens(10)


async def test_an_observer_may_refuse_a_call_before_it_is_sent() -> None:
    heard = Heard(refuse=True)
    scripted = ScriptedLLM(["never sent"])
    llm = MeteredLLM(scripted, observer=heard)
    with pytest.raises(BudgetExceededError):
        await ask_streamed(llm, "q")
    (call,) = heard.calls
    assert call.outcome == "refused" and call.usage == Usage()
    assert scripted.calls == 0 and llm.usage.total.calls == 0
    assert scripted.remaining == 1


async def test_an_observer_may_cut_a_call_short() -> None:
    heard = Heard(cut_after=20)
    llm = MeteredLLM(ScriptedLLM(["x" * 100], chunk_size=10), observer=heard)
    with pytest.raises(BudgetExceededError, match="wrote too much"):
        await ask_streamed(llm, "q")
    (call,) = heard.calls
    assert call.outcome == "cut" and call.chars == 20


class Writing:
    """A model that writes ``first``, then nothing more until it is cancelled."""

    model = "stuck"

    def __init__(self, first: str) -> None:
        self.first = first

    async def complete(self, messages: Any, **options: Any) -> LLMResponse:
        raise NotImplementedError

    async def stream(self, messages: Any, **options: Any) -> Any:
        yield TextDelta(self.first)
        await anyio.sleep_forever()


async def test_a_cancelled_call_keeps_what_the_model_wrote() -> None:
    heard = Heard()
    llm = MeteredLLM(Writing("partial answer"), observer=heard)
    with anyio.CancelScope() as scope:

        async def ask() -> None:
            await ask_streamed(llm, "q")

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            await anyio.wait_all_tasks_blocked()  # it wrote, and waits for more
            scope.cancel()
    (call,) = heard.calls
    assert call.outcome == "cancelled" and call.text == "partial answer"
    assert call.usage.output_tokens == estimate_tokens(14) and call.estimated


async def test_a_failed_complete_is_heard_and_counted() -> None:
    heard = Heard()
    llm = MeteredLLM(
        ScriptedLLM.openai([httpx.Response(400, json=wire.openai_error("bad"))]), observer=heard
    )
    async with llm.llm:
        with pytest.raises(Exception, match="bad"):
            await llm.complete([])
    (call,) = heard.calls
    assert call.outcome == "failed" and call.options == {"stream": False}


async def test_a_reader_rejects_the_last_call_of_its_task() -> None:
    heard = Heard()
    llm = MeteredLLM(ScriptedLLM(["not a plan"]), observer=heard)
    response = await ask_streamed(llm, "q")
    call = last_call()
    assert call is not None and call.response is response
    reject_last_call(["[not_json] plan: no JSON"])
    assert heard.issues == [["[not_json] plan: no JSON"]]
    assert call.issues == ["[not_json] plan: no JSON"]


async def test_calls_of_concurrent_tasks_are_their_own() -> None:
    llm = MeteredLLM(ScriptedLLM(["a", "b"]), observer=Heard())
    seen: dict[str, LiveCall | None] = {}

    async def ask(name: str) -> None:
        await ask_streamed(llm, name)
        seen[name] = last_call()

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask, "one")
        tg.start_soon(ask, "two")
    assert seen["one"] is not seen["two"]
    assert {c.request.messages[0].content for c in seen.values() if c} == {"one", "two"}


async def test_an_unobserved_client_counts_estimated_usage_for_cut_calls() -> None:
    llm = MeteredLLM(ScriptedLLM(["0123456789" * 4], chunk_size=10))
    events = llm.stream("q")
    async for _ in events:
        break
    await events.aclose()
    total = llm.usage.total
    assert total.calls == 1 and total.output_tokens == estimate_tokens(10) and total.estimated


def test_the_server_is_recorded_without_credentials_or_query() -> None:
    class Client:
        model = "m"
        provider_name = "openai"
        base_url = "https://ann:s3cret@llm.example.org:8443/v1?api-key=k3y"

    call = LiveCall.of(Client(), LLMRequest.build("q"))
    assert call.server == "https://llm.example.org:8443/v1"
    assert len({LiveCall.of(Client(), LLMRequest.build("q")).id for _ in range(100)}) == 100
