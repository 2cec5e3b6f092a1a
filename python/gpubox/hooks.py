"""gpubox.hooks: the intervention spec of model.run (hooks/README.md) in a notebook.

    from gpubox import hooks
    hooks.names(model)                                   # the TransformerLens names this model has
    r = hooks.run(model, ids, capture=["blocks.1.hook_resid_post"],
                  add={"blocks.1.hook_resid_post": (vector, 4.0)})
    r["logits"], r["blocks.1.hook_resid_post"], r["captures"]
    hooks.run(model, ids, hooks={"blocks.0.attn.hook_z": ablate})   # your own function (hooks/README.md, "fn")

`model` is a Hugging Face transformers model (GPT-2, Llama, Mistral, Qwen2,
Gemma 2) — the ops are applied by PyTorch forward hooks on the modules that
carry each hook point — or the name of a model of the sandbox's model host,
run there through gpubox's client (`client.model(name).run`). Names, ops,
selections (rows, positions, heads) and results are those of model.run, so a
notebook cell and an RPC caller share them. The agent serves the whole gpubox
package, this file included, to its kernel; it needs torch for transformers
models, and nothing more for the model host's. This module only chooses: the
engine for transformers models is gpubox.hook_engine, the model host's side
gpubox.hook_client.

Points no single module carries (`attn.hook_rot_q/k`, `attn.hook_attn_scores`,
`attn.hook_pattern`) are not offered for transformers models; `hook_resid_mid`
can be captured but not edited there (the residual sum that follows reads the
value before any hook can change it). `attn.hook_result` (each head's z_h @ W_O[h],
[batch, pos, heads, d_model]) is computed from the output projection's input
only when an op names it; once edited, the projection's output is the results'
sum plus its bias.
"""
from . import hook_client, hook_engine
from .hook_client import _CLIENT, _client, sae, weights  # noqa: F401 (the public names of gpubox.hooks)
from .hook_engine import COMMON, EDIT_REFUSED, FIELDS, HEAD_POINTS, OPS  # noqa: F401


def names(model):
    """The hook point names this model offers, in forward order (logits last)."""
    if isinstance(model, str):
        return hook_client.names(model)
    return hook_engine.names(model)


def run(model, ids, ops=(), capture=(), add=None, hooks=None):
    """A forward pass with the spec's ops (model.run's semantics) on a transformers
    model, or on the model host's model of that name. ids: a list of ids, a batch of
    equal-length lists, or a tensor [batch, positions]. hooks={hook: fn} runs your
    functions there (fn ops after ops; the model host's gets them scripted, a
    transformers model calls them as they are). Returns {"logits",
    "captures": [(hook, tensor)], hook: tensor (the last capture of it)}."""
    if isinstance(model, str):
        return hook_client.run(model, ids, ops=ops, capture=capture, add=add, hooks=hooks)
    return hook_engine.run(model, ids, ops=ops, capture=capture, add=add, hooks=hooks)
