"""One chat completion from a server with the official `openai` client, unstreamed and streamed.

Usage: openai_chat.py BASE_URL MODEL QUESTION MAX_TOKENS
Prints two lines, `unstreamed finish=... tokens=... text=...` and `streamed ...` the same.
"""
import sys

from openai import OpenAI


def main() -> int:
    base, model, question, max_tokens = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    client = OpenAI(base_url=base, api_key="unused")
    msgs = [{"role": "user", "content": question}]
    r = client.chat.completions.create(model=model, messages=msgs, max_tokens=max_tokens, temperature=0)
    c = r.choices[0]
    print(f"unstreamed finish={c.finish_reason} tokens={r.usage.completion_tokens} text={c.message.content!r}")
    stream = client.chat.completions.create(
        model=model, messages=msgs, max_tokens=max_tokens, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    print(f"streamed finish={finish} tokens={usage.completion_tokens if usage else None} text={text!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
