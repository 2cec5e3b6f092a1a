#!/usr/bin/env python3
"""Transformers' side of decode_bench.py: batch-1 decode ms/token of
transformers eager (no compile; its default attention and DynamicCache) on
the same checkpoint, the same 16-token prompt and the same measure,
(T(new tokens) - T(1)) / (new tokens - 1), each T the best of 2. The device
check runs it as its transformers_8b step, after the modeld steps, and its
summary sets it against decode_bench's figure (target: modeld >= 4x).

usage: build/venv/bin/python tests/bench/transformers_decode.py [--arch llama8b|llama|gpt2] [--layers N]
           [--hidden-size H] [--device cuda|cpu] [--dtype bfloat16] [--new-tokens 64] [--json FILE]
Exit 0 when it measured.
"""
import argparse
import json
import os
import sys
import time

import torch
import transformers as tf

import model_bench  # beside this file


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="llama8b", choices=["llama8b", "llama", "gpt2"])
    parser.add_argument("--layers", type=int)
    parser.add_argument("--hidden-size", type=int)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--model-dir", help="the checkpoint's cache (default: model_bench.default_model_dir)")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.new_tokens < 2:
        parser.error("--new-tokens must be at least 2")
    model_dir = args.model_dir or model_bench.default_model_dir(args.arch, args.layers, args.hidden_size)
    os.makedirs(os.path.dirname(model_dir), exist_ok=True)
    model_bench.make_model(model_dir, args.arch, args.layers, args.hidden_size)
    start = time.perf_counter()
    model = tf.AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, args.dtype)).to(args.device).eval()
    model_bench.sync(args.device)
    load_s = time.perf_counter() - start
    prompt = torch.randint(3, model.config.vocab_size, (16,), generator=torch.Generator().manual_seed(1)).tolist()
    ids = torch.tensor([prompt], device=args.device)

    def generate(n):
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n,
                             min_new_tokens=n, pad_token_id=0)
        model_bench.sync(args.device)
        return out
    with torch.inference_mode():
        ms = model_bench.decode_ms(generate, args.new_tokens)
    print("transformers %s eager, %s %s on %s: loaded in %.1f s; batch-1 decode %.3f ms/token"
          % (tf.__version__, os.path.basename(model_dir), args.dtype, args.device, load_s, ms))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": os.path.basename(model_dir), "transformers": tf.__version__, "device": args.device,
                       "dtype": args.dtype, "load_s": load_s, "decode_ms": ms}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
