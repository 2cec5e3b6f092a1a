"""gpubox.hook_engine: the intervention spec of model.run (hooks/README.md)
applied to a transformers model in this process, by PyTorch forward hooks on
the modules that carry each hook point; gpubox.hooks' engine for models that
are not the model host's.

Supported: GPT-2, Llama, Mistral, Qwen2, Gemma 2. Points no single module
carries (`attn.hook_rot_q/k`, `attn.hook_attn_scores`, `attn.hook_pattern`)
are not offered; `hook_resid_mid` can be captured but not edited (the
residual sum that follows reads the value before any hook can change it).
`attn.hook_result` (each head's z_h @ W_O[h], [batch, pos, heads, d_model]) is
computed from the output projection's input only when an op names it; once
edited, the projection's output is the results' sum plus its bias. Needs torch.
"""
import math

OPS = ("capture", "set", "add", "scale", "zero", "mean", "project_out", "patch", "fn")
FIELDS = {"capture": {"dtype"}, "set": {"value", "allow_nonfinite"}, "add": {"vector", "scale", "allow_nonfinite"},
          "scale": {"factor"}, "zero": set(), "mean": {"value", "allow_nonfinite"},
          "project_out": {"direction", "allow_nonfinite"}, "patch": {"value", "from_row", "allow_nonfinite"},
          "fn": {"fn", "extra", "allow_nonfinite"}}
COMMON = {"op", "hook", "rows", "positions", "heads"}
HEAD_POINTS = ("attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_z", "attn.hook_result")
EDIT_REFUSED = ("hook_resid_mid",)


def _torch():
    import torch
    return torch


# ---- where each hook point lives in a transformers model -------------------------------------------

class _Point:
    """A hook point on a module: its output (or input) reshaped to TransformerLens' shape."""

    def __init__(self, module, where, heads=None, split=None, norm=None, result=False):
        self.module, self.where, self.heads, self.split, self.norm = module, where, heads, split, norm
        self.result = result  # attn.hook_result: the per-head shares of the output projection (module)


def _norm_kind(model):
    kind = type(model).__name__.lower()
    if "gpt2" in kind:
        return "layer_norm"
    return "rms_one_plus" if "gemma" in kind else "rms"


def _points(model):
    """TransformerLens name -> _Point for a supported transformers model."""
    config = model.config
    kind = type(model).__name__
    points = {}
    if kind.startswith("GPT2"):
        t = model.transformer
        heads = config.n_head
        d = config.n_embd
        points["hook_embed"] = _Point(t.wte, "out")
        points["hook_pos_embed"] = _Point(t.wpe, "out")
        for l, block in enumerate(t.h):
            b = "blocks.%d." % l
            points[b + "hook_resid_pre"] = _Point(block, "in")
            points[b + "ln1.hook_normalized"] = _Point(block.ln_1, "out", norm="layer_norm")
            for i, name in enumerate(("q", "k", "v")):
                points[b + "attn.hook_" + name] = _Point(block.attn.c_attn, "out", heads, split=(i * d, d))
            points[b + "attn.hook_z"] = _Point(block.attn.c_proj, "in", heads)
            points[b + "attn.hook_result"] = _Point(block.attn.c_proj, "out", heads, result=True)
            points[b + "hook_attn_out"] = _Point(block.attn, "out")
            points[b + "hook_resid_mid"] = _Point(block.ln_2, "in")
            points[b + "ln2.hook_normalized"] = _Point(block.ln_2, "out", norm="layer_norm")
            points[b + "mlp.hook_pre"] = _Point(block.mlp.c_fc, "out")
            points[b + "mlp.hook_post"] = _Point(block.mlp.c_proj, "in")
            points[b + "hook_mlp_out"] = _Point(block.mlp, "out")
            points[b + "hook_resid_post"] = _Point(block, "out")
        points["ln_final.hook_normalized"] = _Point(t.ln_f, "out", norm="layer_norm")
        return points
    if not any(kind.startswith(k) for k in ("Llama", "Mistral", "Qwen2", "Gemma2")):
        raise ValueError("gpubox.hooks: %s is not one of the supported transformers models "
                         "(GPT-2, Llama, Mistral, Qwen2, Gemma 2)" % kind)
    inner = model.model
    gemma = kind.startswith("Gemma2")
    norm = _norm_kind(model)
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    points["hook_embed"] = _Point(inner.embed_tokens, "out")
    for l, block in enumerate(inner.layers):
        b = "blocks.%d." % l
        attn, mlp = block.self_attn, block.mlp
        ln2 = block.pre_feedforward_layernorm if gemma else block.post_attention_layernorm
        points[b + "hook_resid_pre"] = _Point(block, "in")
        points[b + "ln1.hook_normalized"] = _Point(block.input_layernorm, "out", norm=norm)
        points[b + "attn.hook_q"] = _Point(attn.q_proj, "out", heads)
        points[b + "attn.hook_k"] = _Point(attn.k_proj, "out", kv_heads)
        points[b + "attn.hook_v"] = _Point(attn.v_proj, "out", kv_heads)
        points[b + "attn.hook_z"] = _Point(attn.o_proj, "in", heads)
        points[b + "attn.hook_result"] = _Point(attn.o_proj, "out", heads, result=True)
        points[b + "hook_attn_out"] = _Point(block.post_attention_layernorm if gemma else attn.o_proj, "out")
        points[b + "hook_resid_mid"] = _Point(ln2, "in")
        points[b + "ln2.hook_normalized"] = _Point(ln2, "out", norm=norm)
        points[b + "mlp.hook_pre"] = _Point(mlp.gate_proj, "out")
        points[b + "mlp.hook_pre_linear"] = _Point(mlp.up_proj, "out")
        points[b + "mlp.hook_post"] = _Point(mlp.down_proj, "in")
        points[b + "hook_mlp_out"] = _Point(block.post_feedforward_layernorm if gemma else mlp, "out")
        points[b + "hook_resid_post"] = _Point(block, "out")
    points["ln_final.hook_normalized"] = _Point(inner.norm, "out", norm=norm)
    return points


def names(model):
    """The hook point names this transformers model offers, in forward order (logits last)."""
    return list(_points(model)) + ["logits"]


# ---- checking a spec -------------------------------------------------------------------------------

def _indices(op, key, where, size, axis):
    values = op.get(key)
    if values is None:
        return None
    if not isinstance(values, (list, tuple)) or not values:
        raise ValueError("%s.%s: expected a non-empty list of integers" % (where, key))
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError("%s.%s: %r is not an integer" % (where, key, v))
        if v < -size or v >= size:
            raise ValueError("%s.%s: %d is out of range for %d %s (valid: %d to %d)" % (where, key, v, size, axis, -size, size - 1))
        out.append(v % size)
    return out


def _as_tensor(value, where):
    torch = _torch()
    if isinstance(value, torch.Tensor):
        return value.detach()
    try:
        return torch.as_tensor(value, dtype=torch.float32)
    except (TypeError, ValueError) as error:
        raise ValueError("%s: expected a tensor (%s)" % (where, error)) from None


def _broadcasts(shape, target):
    if len(shape) > len(target):
        return False
    return all(s == 1 or s == t for s, t in zip(reversed(shape), reversed(target)))


def _edit_distance(a, b):
    """The fewest single-character insertions, deletions and substitutions that turn a into b."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        diagonal, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diagonal + (ca != cb))
    return row[-1]


def _suggest(hook, valid):
    """The valid names nearest to hook (as modeld's hooks/spec.cpp ranks them: edit distance, then order)."""
    nearest = sorted(range(len(valid)), key=lambda i: (_edit_distance(hook, valid[i]), i))[:3]
    return "the nearest valid names are %s (%d in all: hooks.names(model) lists them)" % (
        ", ".join(valid[i] for i in nearest), len(valid))


def _first_nonfinite(tensor):
    """(index, 'NaN' / '+inf' / '-inf') of tensor's first element that is not finite, or None."""
    torch = _torch()
    bad = (~torch.isfinite(tensor)).nonzero()
    if len(bad) == 0:
        return None
    index = [int(i) for i in bad[0]]
    value = float(tensor[tuple(index)])
    return index, "NaN" if value != value else ("+inf" if value > 0 else "-inf")


class _Op:
    """One checked op: kind, hook, selection and its operand."""

    def __init__(self, spec, index, shapes, valid):
        where = "ops[%d]" % index
        if not isinstance(spec, dict):
            raise ValueError("%s: expected a dict {'op': ..., 'hook': ...}" % where)
        self.kind = spec.get("op")
        if self.kind not in OPS:
            raise ValueError("%s.op: unknown operation %r (supported: %s)" % (where, self.kind, ", ".join(OPS)))
        unknown = set(spec) - COMMON - FIELDS[self.kind]
        if unknown:
            raise ValueError("%s: unknown field %r (%s takes hook, rows, positions, heads%s)"
                             % (where, sorted(unknown)[0], self.kind, "".join(", " + f for f in sorted(FIELDS[self.kind]))))
        self.hook = spec.get("hook")
        if self.hook not in shapes:
            raise ValueError("%s.hook: this model has no hook point %r; %s" % (where, self.hook, _suggest(str(self.hook), valid)))
        if self.kind != "capture" and self.hook.endswith(EDIT_REFUSED):
            raise ValueError("%s.hook: %s can be captured but not edited on a transformers model" % (where, self.hook))
        shape, self.head_axis = shapes[self.hook]
        self.position_axis = 1
        self.rows = _indices(spec, "rows", where, shape[0], "batch rows")
        self.positions = _indices(spec, "positions", where, shape[1], "positions")
        if "heads" in spec and self.head_axis is None:
            raise ValueError("%s.heads: %s has no heads axis" % (where, self.hook))
        self.heads = _indices(spec, "heads", where, shape[self.head_axis], "heads") if self.head_axis else None
        region = list(shape)
        for axis, chosen in ((0, self.rows), (1, self.positions), (self.head_axis, self.heads)):
            if chosen is not None:
                region[axis] = len(chosen)
        self.dtype = spec.get("dtype", "float32")
        if self.kind == "capture" and self.dtype not in ("float32", "model"):
            raise ValueError("%s.dtype: %r is not 'float32' or 'model'" % (where, self.dtype))
        self.factor = float(spec.get("factor", spec.get("scale", 1.0)))
        if self.kind == "scale" and "factor" not in spec:
            raise ValueError("%s.factor: scale needs a number" % where)
        if not math.isfinite(self.factor):
            raise ValueError("%s: expected a finite number" % where)
        self.from_row, self.tensor = None, None
        if self.kind == "fn":
            self.fn, self.extra = spec.get("fn"), {k: _as_tensor(v, "%s.extra.%s" % (where, k)) for k, v in spec.get("extra", {}).items()}
            if not callable(self.fn):
                raise ValueError("%s.fn: expected a function (act) or (act, extra) on a transformers model" % where)
            self.allow_nonfinite = spec.get("allow_nonfinite", False)
            if not isinstance(self.allow_nonfinite, bool):
                raise ValueError("%s.allow_nonfinite: expected True or False" % where)
        field = {"set": "value", "mean": "value", "add": "vector", "project_out": "direction"}.get(self.kind)
        if self.kind == "patch":
            if ("value" in spec) == ("from_row" in spec):
                raise ValueError("%s: patch takes either value (a tensor) or from_row (a batch row), not both or neither" % where)
            field = "value" if "value" in spec else None
            if field is None:
                self.from_row = _indices({"from_row": [spec["from_row"]]}, "from_row", where, shape[0], "batch rows")[0]
        if field:
            if field not in spec:
                raise ValueError("%s.%s: %s needs a tensor" % (where, field, self.kind))
            self.tensor = _as_tensor(spec[field], "%s.%s" % (where, field))
            allow = spec.get("allow_nonfinite", False)
            if not isinstance(allow, bool):
                raise ValueError("%s.allow_nonfinite: expected True or False" % where)
            bad = None if allow else _first_nonfinite(self.tensor)
            if bad:
                raise ValueError("%s.%s: element %s is %s; tensors must be finite (allow_nonfinite=True on the op sends "
                                 "it anyway)" % (where, field, bad[0], bad[1]))
            if self.kind == "project_out":
                if list(self.tensor.shape) != [shape[-1]]:
                    raise ValueError("%s.direction: a direction of %s has shape [%d]; this one is %s"
                                     % (where, self.hook, shape[-1], list(self.tensor.shape)))
            elif not _broadcasts(list(self.tensor.shape), region):
                raise ValueError("%s.%s: shape %s does not broadcast to the selected part of %s, %s"
                                 % (where, field, list(self.tensor.shape), self.hook, region))

    def index(self, value, rows=None):
        """Advanced indices selecting this op's part of value (None: all of it)."""
        torch = _torch()
        rows = self.rows if rows is None else rows
        chosen = {0: rows, 1: self.positions}
        if self.head_axis is not None:
            chosen[self.head_axis] = self.heads
        last = max([a for a, c in chosen.items() if c is not None], default=-1)
        if last < 0:
            return None
        index = []
        for axis in range(last + 1):
            view = [1] * (last + 1)
            view[axis] = -1
            picked = chosen.get(axis)
            ids = torch.tensor(picked, device=value.device) if picked is not None else torch.arange(value.shape[axis], device=value.device)
            index.append(ids.view(view))
        return tuple(index)

    def call_fn(self, act, captures):
        """The fn op's replacement of act (a copy of the selected part; None: unchanged), as
        the model host runs it: its captures under "HOOK:NAME", its result's shape and dtype checked."""
        import inspect
        takes_extra = len(inspect.signature(self.fn).parameters) >= 2
        out = self.fn(act, {k: t.to(act.device) for k, t in self.extra.items()}) if takes_extra else self.fn(act)
        if isinstance(out, tuple):
            out, named = out
            captures.extend(("%s:%s" % (self.hook, k), t) for k, t in named.items())
        if out is not None and (tuple(out.shape) != tuple(act.shape) or out.dtype != act.dtype):
            raise ValueError("fn at %s returned %s %s; the activation it was given is %s %s"
                             % (self.hook, list(out.shape), out.dtype, list(act.shape), act.dtype))
        bad = None if out is None or self.allow_nonfinite else _first_nonfinite(out)
        if bad:
            raise ValueError("fn at %s returned %s at element %s (allow_nonfinite=True on the op lets it through)"
                             % (self.hook, bad[1], bad[0]))
        return out

    def replacement(self, value, region):
        """What an edit other than fn puts in place of region (the selected part of value)."""
        torch = _torch()
        given = None if self.tensor is None else self.tensor.to(device=value.device, dtype=value.dtype)
        if self.kind in ("set", "mean") or (self.kind == "patch" and given is not None):
            return given
        if self.kind == "add":
            return region + given * self.factor
        if self.kind == "scale":
            return region * self.factor
        if self.kind == "zero":
            return torch.zeros_like(region)
        if self.kind == "project_out":
            unit = given.float() / given.float().norm()
            r = region.float()
            return (r - (r * unit).sum(-1, keepdim=True) * unit).to(value.dtype)
        return value[self.index(value, [self.from_row])]  # patch from a row

    def apply(self, value, captures):
        """value after this op (value itself for a capture, which appends to captures)."""
        torch = _torch()
        rows = list(range(value.shape[0])) if self.from_row is not None and self.rows is None else None
        index = self.index(value, rows)
        region = value if index is None else value[index]
        if self.kind == "capture":
            captures.append((self.hook, region.to(torch.float32 if self.dtype == "float32" else value.dtype, copy=True)))
            return value
        if self.kind == "fn":
            new = self.call_fn(region.clone() if index is None else region, captures)
            if new is None:
                return value
        else:
            new = self.replacement(value, region)
        if index is None:
            return new.expand(value.shape).contiguous()
        edited = value.clone()
        edited[index] = new.expand(region.shape)
        return edited


# ---- running ---------------------------------------------------------------------------------------

def _normalized(x, kind, eps):
    torch = _torch()
    if kind == "layer_norm":
        return torch.nn.functional.layer_norm(x, x.shape[-1:], eps=eps)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _weighted(n, module, kind):
    if kind == "layer_norm":
        return n * module.weight + module.bias
    if kind == "rms":
        return module.weight * n
    return (n.float() * (1.0 + module.weight.float())).to(n.dtype)


def _eps(module):
    for attr in ("eps", "variance_epsilon"):
        if hasattr(module, attr):
            return getattr(module, attr)
    return 1e-6


def _encode_ops(ops, capture, add):
    wire = [{"op": "add", "hook": h, "vector": s[0] if isinstance(s, tuple) else s,
             "scale": float(s[1]) if isinstance(s, tuple) else 1.0} for h, s in (add or {}).items()]
    return wire + [dict(op) for op in ops] + [{"op": "capture", "hook": h} for h in capture]


def run(model, ids, ops=(), capture=(), add=None, hooks=None):
    """hooks.run on a transformers model: the spec's ops applied by forward hooks
    on the modules that carry each hook point (hooks.run says what it takes and returns)."""
    for hook, given in (hooks or {}).items():
        fn, options = given if isinstance(given, tuple) else (given, {})
        ops = list(ops) + [dict(options, op="fn", hook=hook, fn=fn)]
    torch = _torch()
    tokens = ids if isinstance(ids, torch.Tensor) else torch.tensor(ids if isinstance(ids[0], (list, tuple)) else [ids])
    tokens = tokens.to(next(model.parameters()).device)
    points = _points(model)
    batch, length = tokens.shape
    config = model.config
    hidden = getattr(config, "hidden_size", None) or config.n_embd
    spec = _encode_ops(ops, capture, add)
    shapes = _shapes(model, points, batch, length, hidden)
    valid = list(points) + ["logits"]
    checked = [_Op(s, i, shapes, valid) for i, s in enumerate(spec)]
    captures, handles = [], []
    by_point = {}
    for op in checked:
        by_point.setdefault(op.hook, []).append(op)

    def apply_all(hook, value):
        for op in by_point[hook]:
            value = op.apply(value, captures)
        return value

    for hook, point_ops in by_point.items():
        if hook != "logits":
            handles.append(_install(points[hook], hook, apply_all, batch))
    try:
        with torch.no_grad():
            logits = model(tokens).logits
        if "logits" in by_point:
            logits = apply_all("logits", logits)
    finally:
        for h in handles:
            h.remove()
    result = {"logits": logits, "captures": captures}
    result.update(dict(captures))
    return result


def _shapes(model, points, batch, length, hidden):
    """name -> (shape, heads axis) for this input, from the model's config."""
    config = model.config
    if hasattr(config, "n_head"):  # GPT-2
        head_dim, intermediate = hidden // config.n_head, config.n_inner or 4 * hidden
    else:
        head_dim = getattr(config, "head_dim", None) or hidden // config.num_attention_heads
        intermediate = config.intermediate_size
    shapes = {}
    for name, point in points.items():
        if point.heads:
            shapes[name] = ([batch, length, point.heads, hidden if point.result else head_dim], 2)
        else:
            shapes[name] = ([batch, length, intermediate if ".mlp.hook_" in name else hidden], None)
    shapes["logits"] = ([batch, length, config.vocab_size], None)
    return shapes


def _install(point, hook, apply_all, batch):
    """A forward (pre-)hook on point's module applying hook's ops; returns its handle."""
    def shaped(value):
        v = value.expand(batch, *value.shape[1:]) if value.shape[0] == 1 else value  # GPT-2's position embeddings
        if point.split:
            v = v[..., point.split[0]:point.split[0] + point.split[1]]
        if point.heads:
            v = v.reshape(v.shape[0], v.shape[1], point.heads, -1)
        return v

    def unshaped(original, new):
        if point.heads:
            new = new.reshape(new.shape[0], new.shape[1], -1)
        if point.split:
            start, width = point.split
            return _cat(original[..., :start], new, original[..., start + width:])
        return new

    def change(value, module_input=None):
        if point.result:
            results = _head_results(module_input, point.module, point.heads)
            edited = apply_all(hook, results)
            if edited is results:
                return value
            return edited.sum(2) if point.module.bias is None else edited.sum(2) + point.module.bias
        if point.norm:
            n = _normalized(module_input, point.norm, _eps(point.module))
            edited = apply_all(hook, n)
            return value if edited is n else _weighted(edited, point.module, point.norm)
        v = shaped(value)
        edited = apply_all(hook, v)
        return value if edited is v else unshaped(value, edited)

    if point.where == "in":
        def pre(module, args, kwargs):
            if args:
                return (change(args[0]),) + tuple(args[1:]), kwargs
            return args, dict(kwargs, hidden_states=change(kwargs["hidden_states"]))
        return point.module.register_forward_pre_hook(pre, with_kwargs=True)

    def post(module, args, kwargs, out):
        first = out[0] if isinstance(out, tuple) else out
        new = change(first, args[0] if args else kwargs.get("hidden_states"))
        if new is first:
            return None
        return (new,) + tuple(out[1:]) if isinstance(out, tuple) else new
    return point.module.register_forward_hook(post, with_kwargs=True)


def _head_results(z, module, heads):
    """z [batch, pos, heads·d_head] (the output projection's input) times each head's rows of W_O:
    [batch, pos, heads, d_model], without the bias (TransformerLens' attn.hook_result)."""
    torch = _torch()
    z = z.reshape(z.shape[0], z.shape[1], heads, -1)
    weight = module.weight if type(module).__name__ == "Conv1D" else module.weight.t()  # [heads·d_head, d_model]
    return torch.einsum("bphd,hdm->bphm", z, weight.reshape(heads, z.shape[-1], -1))


def _cat(*parts):
    return _torch().cat(parts, -1)
