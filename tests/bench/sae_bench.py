#!/usr/bin/env python3
"""SAE bench: a top-k feature capture in gpubox-modeld (one model.run with an
sae_capture op) against a plain forward, and against the caller's way without
it — capture the activation over the RPC, then encode it in the caller's
process with SAELens itself (SAE.load_from_disk once, SAE.encode per call,
float32) and take the top k. One run, the figures interleaved (round r runs
each once, in turn) and their medians over --repeat rounds after a warm-up;
bytes over the wire counted for both. Interpreter: build/venv-saelens' (sae-lens
imports only beside TransformerLens 3; scripts/setup_python.sh).

Targets (issue 33): the capture ≤ 10 % over the plain forward; ≥ 2× faster
end to end than the caller's way. Both ways here run on this machine's CPU,
the caller's encode with the same FLOPs as ours, so the second ratio measures
what the round trip and the bytes cost, not a GPU against a laptop.

--shape picks the random model: gpt2-small (12 layers, d=768, 124 M
parameters, where SAE research began) or llama-1b (Llama 3.2 1B's shape: 16
layers, d=2048, 1.24 B parameters, 5 GB of float32), where a 16k SAE is the
share of the forward that it is on the models SAEs are released for.

On a GPU machine (tests/device/run.sh), --device cuda puts modeld there; the
caller's encode stays on the CPU, as on a researcher's own machine, and is
SAELens' formula in torch where sae_lens is not installed.

usage: build/venv-saelens/bin/python tests/bench/sae_bench.py [--shape gpt2-small|llama-1b] [--repeat 7]
           [--tokens 128] [--d-sae 16384] [--top-k 64] [--device cpu|cuda] [--modeld PATH] [--json FILE]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "model", "modeld"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GPUBOX_MODELD", os.path.join(ROOT, "build", "bin", "gpubox-modeld"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers as tf  # noqa: E402
from gpubox.models import Model  # noqa: E402
import modeld_process  # noqa: E402
from modeld_process import Modeld  # noqa: E402
from saelens_format import make_sae  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

try:
    import sae_lens
    from sae_lens import SAE
except ImportError:  # the GPU machine's Python (tests/device/run.sh)
    sae_lens = None


# The random models: AutoConfigs of the shapes named in the module's docstring.
SHAPES = {
    "gpt2-small": lambda: tf.GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024),
    "llama-1b": lambda: tf.LlamaConfig(num_hidden_layers=16, hidden_size=2048, intermediate_size=8192,
                                       num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                                       tie_word_embeddings=True, max_position_embeddings=2048),
}


def callers_encoder(sae_path):
    """(encode, what it is): SAELens' SAE.encode, or where sae_lens is not
    installed (the GPU machine) the formula its StandardSAE.encode computes for
    make_sae's SAEs (standard, b_dec applied to the input, no normalisation)."""
    if sae_lens:
        return SAE.load_from_disk(sae_path, device="cpu").encode, "sae_lens %s SAE.encode" % sae_lens.__version__
    w = load_file(os.path.join(sae_path, "sae_weights.safetensors"))
    return (lambda x: torch.relu((x - w["b_dec"]) @ w["W_enc"] + w["b_enc"]),
            "SAELens' StandardSAE.encode formula in torch (sae_lens is not installed here)")


def interleaved_medians(fns, repeat):
    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--d-sae", type=int, default=16384)
    parser.add_argument("--top-k", type=int, default=64)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="gpt2-small")
    parser.add_argument("--device", default="cpu", help="modeld's; the caller's encode is always on the CPU")
    parser.add_argument("--modeld", default=os.environ["GPUBOX_MODELD"])
    parser.add_argument("--json")
    args = parser.parse_args()
    modeld_process.MODELD = args.modeld
    work = tempfile.mkdtemp(prefix="sae-bench-")
    torch.manual_seed(0)
    model_config = SHAPES[args.shape]()
    path = os.path.join(work, "model")
    random_model = tf.AutoModelForCausalLM.from_config(model_config).eval()
    params = sum(p.numel() for p in random_model.parameters()) / 1e6
    random_model.save_pretrained(path)
    del random_model
    layers, hidden, vocab = model_config.num_hidden_layers, model_config.hidden_size, model_config.vocab_size
    hook = "blocks.%d.hook_resid_post" % (layers // 2)
    sae_path, _, _ = make_sae(work, "sae", hidden, args.d_sae, hook=hook, seed=1)
    modeld = Modeld([{"name": "m", "path": path, "device": args.device, "saes": [{"name": "sae", "path": sae_path}]}], os.path.join(work, "run"))
    try:
        modeld.wait_all_ready()
        model = Model(modeld.client, "m")
        dtype = modeld.client.call("model.info", model="m")["dtype"]  # modeld's default: bfloat16 on cuda
        ids = [int(i) for i in torch.randint(3, vocab, (args.tokens,))]
        encode, encoder = callers_encoder(sae_path)
        wire = {}

        def plain():
            model.run(ids=ids, last_only=True)

        def ours():
            r = model.run(ids=ids, last_only=True, ops=[{"op": "sae_capture", "sae": "sae", "top_k": args.top_k}])
            wire["ours"] = r["sae:sae:indices"].numel() * 8 + r["sae:sae:values"].numel() * 4
            return r

        def callers():
            r = model.run(ids=ids, last_only=True, capture=[hook])
            x = r[hook]
            wire["caller"] = x.numel() * x.element_size()
            with torch.no_grad():
                return torch.topk(encode(x), args.top_k, dim=-1)

        same = ours()["sae:sae:indices"][0].sort(-1).values
        mine = callers()[1][0].sort(-1).values
        agree = float((same == mine).float().mean())
        t = interleaved_medians({"plain forward": plain, "gpubox sae_capture": ours, "capture + caller's encode": callers},
                                args.repeat)
    finally:
        modeld.close()
    overhead = t["gpubox sae_capture"] / t["plain forward"] - 1
    speedup = t["capture + caller's encode"] / t["gpubox sae_capture"]
    print("SAE top-%d capture, %d-wide SAE at %s, %d tokens; %s-shaped random model (%d layers, d=%d, %.0f M params), "
          "modeld on %s in %s, the caller's encode on the CPU (%d threads): %s; median of %d"
          % (args.top_k, args.d_sae, hook, args.tokens, args.shape, layers, hidden, params, args.device, dtype,
             torch.get_num_threads(), encoder, args.repeat))
    for name, seconds in t.items():
        print("  %-28s %8.1f ms" % (name, seconds * 1e3))
    print("  ours over the plain forward: %+.1f %% (target ≤ +10 %%)" % (overhead * 100))
    print("  caller's way / ours: %.2fx (target ≥ 2x); bytes back: ours %d, caller's %d (%.1fx fewer)"
          % (speedup, wire["ours"], wire["caller"], wire["caller"] / wire["ours"]))
    print("  the same top-%d features as the caller's encode: %.4f of them" % (args.top_k, agree))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": args.shape, "device": args.device, "dtype": dtype, "encoder": encoder, "seconds": t, "overhead": overhead, "speedup": speedup, "bytes": wire, "agree": agree}, f)


if __name__ == "__main__":
    main()
