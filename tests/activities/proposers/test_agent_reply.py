"""What one model reply means to the conversation, read from completions built as the openai client
builds them from a server's JSON: tool calls, a submission, giving up, a plain fenced answer, a
reply cut off at the token cap, and the ways servers and models get tool calls wrong."""

from __future__ import annotations

import json

import pytest
from openai._models import construct_type
from openai.types.chat import ChatCompletion

from activities.agent.reply import NOTHING_NOTE, read_reply
from activities.agent.tools import TOOL_SPECS, BadArguments, parse_arguments, shown_arguments
from activities.proposers.llm import UnusableCompletion
from proposer_requests import GOOD_REPLY, KERNEL
from workflows.agent_types import TOOL_NAMES


def completion(message: dict, finish_reason: str = "tool_calls", usage: bool = True) -> ChatCompletion:
    body = {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish_reason}]}
    if usage:
        body["usage"] = {"prompt_tokens": 40, "completion_tokens": 2, "total_tokens": 42}
    # As the client builds it from a response: leniently, without validation (a server's slip stays).
    return construct_type(type_=ChatCompletion, value=body)


def calls(*pairs) -> dict:
    return {"content": None, "tool_calls": [
        {"id": f"id{n}", "type": "function", "function": {"name": name, "arguments": arguments}}
        for n, (name, arguments) in enumerate(pairs)]}


def test_tool_calls_are_listed_with_positions_and_bad_ones_marked():
    reply = read_reply(completion(calls(("read_problem", "{}"), ("run", "{not json"), ("nope", "{}"))), [], None)
    assert [(c.position, c.call_id, c.name, c.bad) for c in reply.tool_calls] == [
        (0, "id0", "read_problem", False), (1, "id1", "run", True), (2, "id2", "nope", True)]
    assert reply.tokens == 42 and reply.source is None and reply.note == ""
    assert reply.message["tool_calls"][1]["function"]["arguments"] == "{not json"


def test_a_submission_ends_the_conversation_with_its_source():
    arguments = json.dumps({"source": KERNEL, "strategy": "tiles of 1024"})
    reply = read_reply(completion(calls(("read_notebook", "{}"), ("submit_candidate", arguments))), [], None)
    assert reply.source == KERNEL and reply.strategy == "tiles of 1024" and reply.gave_up is None


def test_a_submission_without_a_source_is_a_bad_call_not_a_candidate():
    reply = read_reply(completion(calls(("submit_candidate", json.dumps({"strategy": "x"})))), [], None)
    assert reply.source is None and [c.bad for c in reply.tool_calls] == [True]


def test_giving_up_carries_the_reason():
    reply = read_reply(completion(calls(("give_up", json.dumps({"reason": "the reference is wrong"})))), [], None)
    assert reply.gave_up == "the reference is wrong" and reply.source is None


def test_a_fenced_answer_counts_as_a_submission():
    reply = read_reply(completion({"content": GOOD_REPLY}, "stop"), [], None)
    assert reply.source == KERNEL and reply.strategy == "one program per 4096 elements"


def test_a_reply_with_neither_gets_a_note():
    reply = read_reply(completion({"content": "Let me think about tiling."}, "stop"), [], None)
    assert reply.source is None and reply.tool_calls == [] and reply.note == NOTHING_NOTE


def test_a_reply_cut_off_at_the_cap_is_never_used():
    cut = completion({"content": GOOD_REPLY[:-10], **calls(("run", '{"source": "imp'))}, "length")
    reply = read_reply(cut, [], 256)
    assert reply.finish_reason == "length" and reply.source is None and reply.tool_calls == []
    assert "tool_calls" not in reply.message  # a note follows it, so no call may stay unanswered
    assert "cut off at the token cap (256 tokens)" in reply.note


def test_servers_that_omit_ids_or_usage_still_work():
    message = {"content": None, "tool_calls": [{"type": "function", "function": {"name": "read_problem",
                                                                                "arguments": "{}"}}]}
    reply = read_reply(completion(message, usage=False), [{"role": "user", "content": "x" * 400}], None)
    assert reply.tool_calls[0].call_id == "call_0"
    assert reply.tokens > 100  # estimated from the characters sent and received


def test_an_answer_without_choices_is_unusable():
    with pytest.raises(UnusableCompletion):
        read_reply(ChatCompletion.model_construct(choices=[]), [], None)


@pytest.mark.parametrize("name, text, message", [
    ("run", "[1]", "the arguments of run must be a JSON object, got list"),
    ("time", json.dumps({"source": "x", "shape": -1}), "shape must be an integer >= 0, got -1"),
    ("give_up", "{}", "give_up needs reason (non-empty text)"),
])
def test_bad_arguments_say_what_to_send(name, text, message):
    with pytest.raises(BadArguments, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        parse_arguments(name, text)


def test_the_tools_offered_are_the_tools_answered():
    assert [spec["function"]["name"] for spec in TOOL_SPECS] == list(TOOL_NAMES)
    assert shown_arguments({"source": "a\nb\nc", "shape": 1}) == "source: 5 chars, 3 lines; shape: 1"


@pytest.mark.parametrize("max_output_tokens, tokens_left, cap", [
    (None, None, None),           # the endpoint's default
    (None, 2_000_000, None),      # a whole run's budget is no reply's cap
    (None, 150, 150),             # a few tokens left cap the reply
    (4096, 2_000_000, 4096),
    (4096, 100, 100),
    (64, 5, 16),                  # never below a usable reply
])
def test_a_replys_token_cap(max_output_tokens, tokens_left, cap):
    from activities.agent.conversation import reply_cap

    assert reply_cap(max_output_tokens, tokens_left) == cap
