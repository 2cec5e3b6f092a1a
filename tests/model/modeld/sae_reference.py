"""SAEs in SAELens' on-disk format, made here, and an independent numpy
reference of SAELens' inference formulas (sae_lens 6.x, saes/sae.py,
standard_sae.py, jumprelu_sae.py, topk_sae.py), in float64.

Why not sae_lens itself: no release imports beside the pinned transformer-lens
4.3.0. sae-lens 6.54.x requires transformer-lens < 4; 6.51.1 installs by its
metadata but `import sae_lens` fails (`from transformer_lens.HookedTransformer
import HookedRootModule`: TransformerLens 4 removed HookedTransformer).

The formulas, as SAELens writes them:
  process_sae_in: x → norm_in(x) − b_dec·apply_b_dec_to_input
    constant_norm_rescale: c = √d_in / ‖x‖, x·c (decode divides by c)
    layer_norm: μ = mean(x), σ = std(x − μ) (unbiased), (x − μ)/(σ + 1e−5) (decode: ·σ + μ)
  hidden_pre = sae_in @ W_enc + b_enc
  standard: relu(hidden_pre); jumprelu: relu(h)·(h > threshold);
  topk: (h·‖W_dec[f]‖ if rescale_acts_by_decoder_norm) → top k kept, relu'd, rest 0
  decode: (acts / ‖W_dec[f]‖ if rescale) @ W_dec + b_dec, then norm_out
  with the error term (HookedSAETransformer's use_error_term): decode(edited) + (x − decode(encode(x)))
"""
import json
import os

import numpy as np
from safetensors.numpy import save_file


def make_sae(directory, name, d_in, d_sae=128, architecture="standard", hook=None, seed=0, k=None,
             apply_b_dec_to_input=True, normalize="none", rescale=False, dead=(), extra=None, weights_edit=None):
    """Writes directory/name/{cfg.json, sae_weights.safetensors} as SAELens 6's save_model does;
    returns (path, weights: dict of float32 arrays, cfg). Features in `dead` never fire
    (b_enc −1e4), so editing them must change nothing."""
    rng = np.random.default_rng(seed)
    w = {
        "W_enc": (rng.standard_normal((d_in, d_sae)) / np.sqrt(d_in)).astype(np.float32),
        "b_enc": (rng.standard_normal(d_sae) * 0.1).astype(np.float32),
        "W_dec": (rng.standard_normal((d_sae, d_in)) / np.sqrt(d_sae)).astype(np.float32),
        "b_dec": (rng.standard_normal(d_in) * 0.1).astype(np.float32),
    }
    if architecture == "jumprelu":
        w["threshold"] = np.abs(rng.standard_normal(d_sae) * 0.2).astype(np.float32)
    for f in dead:
        w["b_enc"][f] = -1e4
    if weights_edit:
        weights_edit(w)
    cfg = {"architecture": architecture, "d_in": d_in, "d_sae": d_sae, "dtype": "float32", "device": "cpu",
           "apply_b_dec_to_input": apply_b_dec_to_input, "normalize_activations": normalize,
           "reshape_activations": "none",
           "metadata": {"model_name": "tiny", "hook_name": hook, "hook_head_index": None, "sae_lens_version": "6.51.1",
                        "sae_lens_training_version": None, "prepend_bos": True, "dataset_path": None,
                        "context_size": None, "model_from_pretrained_kwargs": None, "neuronpedia_id": None,
                        "seqpos_slice": [None], "exclude_special_tokens": False, "dataset_trust_remote_code": None}}
    if architecture == "topk":
        cfg["k"] = k
        cfg["rescale_acts_by_decoder_norm"] = rescale
    cfg.update(extra or {})
    path = os.path.join(directory, name)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "cfg.json"), "w") as f:
        json.dump(cfg, f)
    save_file(w, os.path.join(path, "sae_weights.safetensors"))
    return path, w, cfg


class Reference:
    """SAELens' encode and decode in numpy float64 (the module docstring has the formulas)."""

    def __init__(self, weights, cfg):
        self.w = {k: v.astype(np.float64) for k, v in weights.items()}
        self.cfg = cfg

    def encode(self, x):
        """(acts, state) for x [..., d_in]; state is what decode needs to undo the normalisation."""
        x = np.asarray(x, dtype=np.float64)
        state = {}
        norm = self.cfg["normalize_activations"]
        if norm == "constant_norm_rescale":
            state["c"] = np.sqrt(self.cfg["d_in"]) / np.linalg.norm(x, axis=-1, keepdims=True)
            x = x * state["c"]
        elif norm == "layer_norm":
            mu = x.mean(-1, keepdims=True)
            x = x - mu
            sigma = x.std(-1, ddof=1, keepdims=True)
            state["mu"], state["sigma"] = mu, sigma
            x = x / (sigma + 1e-5)
        if self.cfg["apply_b_dec_to_input"]:
            x = x - self.w["b_dec"]
        hidden = x @ self.w["W_enc"] + self.w["b_enc"]
        arch = self.cfg["architecture"]
        if arch == "standard":
            acts = np.maximum(hidden, 0)
        elif arch == "jumprelu":
            acts = np.maximum(hidden, 0) * (hidden > self.w["threshold"])
        else:
            if self.cfg.get("rescale_acts_by_decoder_norm"):
                hidden = hidden * np.linalg.norm(self.w["W_dec"], axis=-1)
            k = self.cfg["k"]
            top = np.argpartition(-hidden, k - 1, axis=-1)[..., :k]
            acts = np.zeros_like(hidden)
            np.put_along_axis(acts, top, np.maximum(np.take_along_axis(hidden, top, -1), 0), -1)
        return acts, state

    def decode(self, acts, state):
        if self.cfg.get("rescale_acts_by_decoder_norm"):
            acts = acts / np.linalg.norm(self.w["W_dec"], axis=-1)
        out = acts @ self.w["W_dec"] + self.w["b_dec"]
        norm = self.cfg["normalize_activations"]
        if norm == "constant_norm_rescale":
            out = out / state["c"]
        elif norm == "layer_norm":
            out = out * state["sigma"] + state["mu"]
        return out

    def splice(self, x):
        acts, state = self.encode(x)
        return self.decode(acts, state)

    def edit(self, x, features, values=None):
        """Features zeroed (values None) or set, decoded, the error term added (use_error_term)."""
        acts, state = self.encode(x)
        edited = acts.copy()
        for i, f in enumerate(features):
            edited[..., f] = 0.0 if values is None else values[i]
        return self.decode(edited, state) + (np.asarray(x, dtype=np.float64) - self.decode(acts, state))

    def steer(self, x, features, scale):
        return np.asarray(x, dtype=np.float64) + scale * self.w["W_dec"][list(features)].sum(0)
