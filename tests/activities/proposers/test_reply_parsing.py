"""What of an LLM reply becomes the candidate, and what becomes a failed proposal."""

from activities.proposers.parse import parse_reply

KERNEL = "import triton\n\n\ndef kernel(x):\n    return x\n"


def test_the_python_block_that_defines_kernel_becomes_the_source():
    reply = f"Strategy: fuse the two loops\n\nHere it is:\n```python\n{KERNEL}```\nDone."
    parsed = parse_reply(reply)
    assert parsed.error is None
    assert parsed.source == KERNEL
    assert parsed.strategy == "fuse the two loops"


def test_the_last_kernel_block_wins_over_earlier_drafts_and_snippets():
    draft = KERNEL.replace("return x", "return x  # draft")
    reply = (
        f"First try:\n```python\n{draft}```\nA helper:\n```python\nprint('usage')\n```\n"
        f"**Strategy:** split K across programs\nFinal:\n```py\n{KERNEL}```\n"
    )
    parsed = parse_reply(reply)
    assert parsed.source == KERNEL
    assert parsed.strategy == "split K across programs"


def test_without_a_strategy_line_the_first_prose_line_is_the_strategy():
    parsed = parse_reply(f"## Use a larger BT to amortize the state load\n```python\n{KERNEL}```")
    assert parsed.strategy == "Use a larger BT to amortize the state load"


def test_a_reply_without_code_is_an_error_with_a_reason():
    parsed = parse_reply("I would tile the loop by 64 and use more warps.")
    assert parsed.source is None
    assert "no fenced ```python code block" in parsed.error


def test_a_block_without_kernel_is_an_error():
    parsed = parse_reply("```python\ndef helper(x):\n    return x\n```")
    assert parsed.source is None
    assert parsed.error == "the reply's code block does not define kernel(**inputs)"


def test_a_cut_off_block_says_so():
    parsed = parse_reply("Strategy: more warps\n```python\ndef kernel(x):\n    return")
    assert parsed.source is None
    assert "not closed" in parsed.error


def test_invalid_python_is_an_error_with_the_line():
    parsed = parse_reply("```python\ndef kernel(x):\n    return (x\n\nfoo = 1\n```")
    assert parsed.source is None
    assert parsed.error.startswith("the reply's code block is not valid Python: line")


def test_an_empty_reply_is_an_error():
    assert parse_reply("").error == "the reply was empty"
    assert parse_reply(None).error == "the reply was empty"
