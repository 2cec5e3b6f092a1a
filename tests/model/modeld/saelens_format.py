"""SAEs in SAELens' on-disk format (cfg.json + sae_weights.safetensors, as SAELens 6's
save_model writes them), made here for the tests; SAELens itself reads them back
(saelens_peer.py)."""
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
