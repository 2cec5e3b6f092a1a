"""SAELens itself, the peer of test_modeld_sae.py: run in build/venv-saelens
(sae-lens 6.54 with TransformerLens 3, scripts/python/requirements-saelens.txt),
never imported by the tests, whose venv has TransformerLens 4.

    build/venv-saelens/bin/python saelens_peer.py IN.safetensors OUT.safetensors

IN's metadata "request" is JSON:
  {"saes": {name: SAE directory}, "models": {name: transformers model directory},
   "tokens": [ids],
   "encode": [{"out": key, "sae": name, "input": tensor in IN}],
   "logits": [{"out": key, "model": name, "sae": name or null, "error_term": bool,
               "edit": null or {"features": [f], "op": "zero"|"set"|"add", "values": [v],
                                "positions": [p] or null, "rows": [r] or null}}]}
OUT gets, per encode, key + ":acts" (SAE.encode) and key + ":recon"
(SAE.decode of them), in float64 (the SAE loaded with dtype float64); per
logits, key: the float32 logits of HookedSAETransformer (the model built by
TransformerLens 3 from the same weights, unprocessed) with the SAE attached
(run_with_saes) and the edit made by a hook on the SAE's hook_sae_acts_post
(run_with_hooks_with_saes), or plain without an SAE.
"""
import json
import os
import sys
import tempfile

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from sae_lens import SAE, HookedSAETransformer
from transformer_lens import loading_from_pretrained as loading
from transformers import AutoModelForCausalLM


def hooked_transformer(path):
    """HookedSAETransformer of a transformers model directory, raw weights (no folding, no centering).
    TransformerLens 3 takes a local directory only through its config (from_pretrained wants an
    official name), picks Llama's branch by the directory's name without reading config.json, and
    reads GPT-2's n_ctx, which transformers 5 no longer writes: hence a copy under a neutral name."""
    link = os.path.join(tempfile.mkdtemp(prefix="saelens-peer-"), "model")
    os.mkdir(link)
    for name in os.listdir(path):
        if name != "config.json":
            os.symlink(os.path.join(os.path.abspath(path), name), os.path.join(link, name))
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    if "n_positions" in config:
        config.setdefault("n_ctx", config["n_positions"])
    with open(os.path.join(link, "config.json"), "w") as f:
        json.dump(config, f)
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    cfg = loading.get_pretrained_model_config(link, hf_cfg=hf.config.to_dict(), fold_ln=False, device="cpu",
                                              dtype=torch.float32)
    cfg.tokenizer_name = None  # the peer gets token ids
    state = loading.get_pretrained_state_dict(link, cfg, hf, dtype=torch.float32)
    model = HookedSAETransformer(cfg)
    model.load_and_process_state_dict(state, fold_ln=False, center_writing_weights=False, center_unembed=False,
                                      fold_value_biases=False, refactor_factored_attn_matrices=False)
    return model.eval()


def edit_hook(edit):
    """A hook on hook_sae_acts_post making the edit: zero, set or add to features' activations."""
    def hook(acts, hook=None):
        acts = acts.clone()
        rows = edit.get("rows") or range(acts.shape[0])
        positions = edit.get("positions") or range(acts.shape[1])
        for r in rows:
            for p in positions:
                for i, feature in enumerate(edit["features"]):
                    if edit["op"] == "zero":
                        acts[r, p, feature] = 0.0
                    elif edit["op"] == "set":
                        acts[r, p, feature] = edit["values"][i]
                    else:
                        acts[r, p, feature] += edit["values"][i]
        return acts
    return hook


def main(path_in, path_out):
    with safe_open(path_in, "pt") as f:
        request = json.loads(f.metadata()["request"])
        inputs = {k: f.get_tensor(k) for k in f.keys()}
    out = {}
    for job in request.get("encode", []):
        sae = SAE.load_from_disk(request["saes"][job["sae"]], device="cpu", dtype="float64")
        with torch.no_grad():
            acts = sae.encode(inputs[job["input"]].double())
            out[job["out"] + ":acts"] = acts
            out[job["out"] + ":recon"] = sae.decode(acts)
    models, saes = {}, {}
    tokens = torch.tensor([request.get("tokens", [])])
    for job in request.get("logits", []):
        if job["model"] not in models:
            models[job["model"]] = hooked_transformer(request["models"][job["model"]])
        model = models[job["model"]]
        with torch.no_grad():
            if job.get("sae") is None:
                logits = model(tokens)
            else:
                if job["sae"] not in saes:
                    saes[job["sae"]] = SAE.load_from_disk(request["saes"][job["sae"]], device="cpu")
                sae = saes[job["sae"]]
                if job.get("edit") is None:
                    logits = model.run_with_saes(tokens, saes=[sae], use_error_term=job["error_term"])
                else:
                    hook = sae.cfg.metadata.hook_name + ".hook_sae_acts_post"
                    with model.saes(saes=[sae], use_error_term=job["error_term"]):
                        logits = model.run_with_hooks(tokens, fwd_hooks=[(hook, edit_hook(job["edit"]))])
        out[job["out"]] = logits.float().contiguous()
    save_file({k: v.contiguous() for k, v in out.items()}, path_out)


if __name__ == "__main__":
    main(*sys.argv[1:])
