"""Stream a chat completion from a moefleet server with the official `openai` client.

Usage: openai_stream.py BASE_URL   (e.g. http://127.0.0.1:8080/v1)
Prints one summary line: chunks, finish reason, usage.
"""
import sys

from openai import OpenAI


def main() -> int:
    client = OpenAI(base_url=sys.argv[1], api_key="unused")
    stream = client.chat.completions.create(
        model="inkling-nano",
        messages=[{"role": "user", "content": "Explain tides to a curious ten-year-old."}],
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks, finish, usage, text = 0, None, None, ""
    for chunk in stream:
        if chunk.choices:
            chunks += 1
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    print(f"chunks={chunks} finish={finish} completion_tokens={usage.completion_tokens if usage else None} text={text!r}")
    return 0 if usage and finish else 1


if __name__ == "__main__":
    sys.exit(main())
