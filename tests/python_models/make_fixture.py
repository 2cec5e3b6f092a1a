"""Run with the venv's python: makes the model-client tests' models and the
references transformers computes on them, then prints their paths as JSON.

usage: make_fixture.py DIR   ->  DIR/llama (a tiny Llama with a byte-level BPE tokenizer.json),
                                 DIR/big (the same architecture, ~130 MB in bf16, to watch a load),
                                 DIR/refs.json (greedy tokens) and DIR/logits{0,1}.npy;
                                 nothing when DIR already holds what these sources make
"""
import hashlib
import json
import os
import sys

import numpy as np
import torch
import transformers as tf

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model", "modeld"))
import tiny_models  # noqa: E402
import fn_example  # noqa: E402  (beside this file)

PROMPT_IDS = [[1, 72, 101, 108, 108, 111], [1, 50, 60]]  # a batch; modeld pads it on the left
GENERATE_IDS = [1, 72, 101, 108]
NEW_TOKENS = 12


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (the ByteLevel pre-tokenizer's alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def byte_level_tokenizer():
    """A byte-level BPE tokenizer.json: ids 0..255 are the bytes, no merges, <s>=1 and </s>=2 as added tokens."""
    table = bytes_to_unicode()
    vocab = {table[b]: b for b in range(256)}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": 1, "content": "<s>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
            {"id": 2, "content": "</s>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }


def source_stamp():
    """What the fixture is made from: this file, tiny_models.py and fn_example.py (a change remakes it)."""
    digest = hashlib.sha256()
    for source in (__file__, tiny_models.__file__, fn_example.__file__):
        with open(source, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    refs_path = os.path.join(out, "refs.json")
    if os.path.exists(refs_path):
        with open(refs_path) as f:
            if json.load(f).get("stamp") == source_stamp():
                print("up to date: %s" % refs_path)
                return
    path, model = tiny_models.make(out, "llama", seed=3)
    with open(os.path.join(path, "tokenizer.json"), "w") as f:
        json.dump(byte_level_tokenizer(), f)
    with torch.no_grad():
        # The references: each prompt alone (no padding in transformers), compared row by row.
        logits = [model(torch.tensor([ids])).logits[0].numpy() for ids in PROMPT_IDS]
        greedy = model.generate(torch.tensor([GENERATE_IDS]), max_new_tokens=NEW_TOKENS, do_sample=False,
                                eos_token_id=None, pad_token_id=0)[0, len(GENERATE_IDS):].tolist()
    np.save(os.path.join(out, "logits0.npy"), logits[0])
    np.save(os.path.join(out, "logits1.npy"), logits[1])
    big_config = tf.LlamaConfig(num_hidden_layers=4, hidden_size=1024, intermediate_size=2816, num_attention_heads=8,
                                num_key_value_heads=8, vocab_size=32000, max_position_embeddings=256)
    big = tf.LlamaForCausalLM(big_config).to(torch.bfloat16)
    big.save_pretrained(os.path.join(out, "big"))
    # fn_example.double as torch.jit.save writes it: the fn op's archive for a client without torch.
    double_fn = os.path.join(out, "double_fn.pt")
    torch.jit.save(torch.jit.script(fn_example.double), double_fn)
    refs = {"llama": path, "big": os.path.join(out, "big"), "prompt_ids": PROMPT_IDS, "generate_ids": GENERATE_IDS,
            "new_tokens": NEW_TOKENS, "greedy": greedy, "double_fn": double_fn, "stamp": source_stamp()}
    with open(refs_path, "w") as f:
        json.dump(refs, f)
    print(json.dumps(refs))


if __name__ == "__main__":
    main()
