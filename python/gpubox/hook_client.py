"""gpubox.hook_client: gpubox.hooks for a model of the sandbox's model host,
named by a string: model.hooks, model.run, SAEs and weights through the
kernel's client of its own agent (GPUBOX_ENDPOINT), made once. Needs no torch.
"""


_CLIENT = []


def _client():
    """The kernel's client of its own agent (GPUBOX_ENDPOINT), made once."""
    if not _CLIENT:
        import os
        from .client import Client
        endpoint = os.environ.get("GPUBOX_ENDPOINT")
        if not endpoint:
            raise RuntimeError("gpubox.hooks: no GPUBOX_ENDPOINT: a model host's model is reachable only in a gpubox kernel")
        _CLIENT.append(Client(endpoint))
    return _CLIENT[0]


def sae(model, name, path=None, hook=None):
    """An SAE of the model host's model `model` (a name): loaded from path (SAELens'
    format) when given; its .capture(), .steer(), .ablate(), .set(), .splice() ops go
    into run(model, ...) (docs/saes_and_weights.md). Not for transformers models."""
    if not isinstance(model, str):
        raise TypeError("hooks.sae: SAEs run in the model host; give a model host's model name")
    return _client().model(model).sae(name, path=path, hook=hook)


def weights(model, names=None, dtype=None):
    """model.weights of the model host's model `model`: TransformerLens' names and shapes."""
    if not isinstance(model, str):
        raise TypeError("hooks.weights: give a model host's model name (a transformers model has its own parameters)")
    return _client().model(model).weights(names, dtype=dtype)


def names(model):
    """The hook point names of the model host's model `model`, in forward order (logits last)."""
    return [h["name"] for h in _client().call("model.hooks", model=model)["hooks"]]


def run(model, ids, ops=(), capture=(), add=None, hooks=None):
    """hooks.run on the model host's model `model`: its model.run (client.model(name).run)."""
    return _client().model(model).run(ids=ids, ops=ops, capture=capture, add=add, hooks=hooks)
