#!/usr/bin/env python3
"""scripts/openai_client_check.py — `colibri serve` through the official `openai` package.

A developer tool (never run by the build or CI): completions, chat and streaming through
the client library, checking the shapes and that a seed reproduces. Needs a tools venv:
  python3 -m venv /tmp/venv && /tmp/venv/bin/pip install openai
  /tmp/venv/bin/python scripts/openai_client_check.py PORT [--api-key KEY]
"""
import argparse
import sys

try:
    import openai
except ImportError:
    sys.exit("openai_client_check: needs the openai package (see the docstring for the venv)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--api-key", default="none")
    a = ap.parse_args()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{a.port}/v1", api_key=a.api_key)
    print(f"openai {openai.__version__}")
    models = client.models.list()
    model = models.data[0].id
    print("models:", [m.id for m in models.data])

    c = client.completions.create(model=model, prompt="Once upon a time", max_tokens=24, temperature=0)
    assert c.object == "text_completion" and c.choices[0].text, c
    print(f"completion ({c.usage.completion_tokens} tokens, finish {c.choices[0].finish_reason}): {c.choices[0].text!r}")

    chat = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello"}],
                                          max_tokens=16, temperature=0.7, seed=5)
    again = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello"}],
                                           max_tokens=16, temperature=0.7, seed=5)
    assert chat.choices[0].message.role == "assistant"
    assert chat.choices[0].message.content == again.choices[0].message.content, "seed did not reproduce"
    print(f"chat (seed 5, twice the same): {chat.choices[0].message.content!r}")

    pieces = []
    usage = None
    for chunk in client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello"}],
                                                max_tokens=16, temperature=0.7, seed=5, stream=True,
                                                stream_options={"include_usage": True}):
        if chunk.usage:
            usage = chunk.usage
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
    assert "".join(pieces) == chat.choices[0].message.content, "streamed text differs from the non-streamed"
    assert usage and usage.completion_tokens == chat.usage.completion_tokens
    print(f"chat stream: {len(pieces)} pieces, same text, usage {usage.completion_tokens} tokens")

    try:
        client.completions.create(model=model, prompt="x", max_tokens=4, temperature=5)
        raise AssertionError("temperature 5 was accepted")
    except openai.BadRequestError as e:
        print(f"temperature 5: HTTP {e.status_code}: {e.body['message'] if isinstance(e.body, dict) else e}")
    print("openai_client_check: all checks passed")


if __name__ == "__main__":
    main()
