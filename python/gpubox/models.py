"""The model host's methods (rpc/PROTOCOL.md, "Models") on a gpubox Client.

    model = client.model("tiny")
    model.wait_ready()
    out = model.forward(ids=[[1, 2, 3]], last_only=True)   # {"logits": tensor, "lengths": [3], "padding": "left"}
    model.generate("Hello", max_new_tokens=8)               # {"tokens": [...], "text": "...", "finish_reason": ...}
    model.chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True)  # {"text", "ids"}
    model.generate(messages=[{"role": "user", "content": "Hi"}])  # rendered with the model's chat template
    for step in model.generate_stream("Hello"):             # {"step": 0, "tokens": [id], "text": ["..."]}
        ...

Tensors come back as torch tensors when torch can be imported, else as numpy
arrays; both share the received frame's memory where the dtype allows (no
copy). Like its Client, a Model belongs to one thread.
"""

import hashlib
import json
import numbers
import secrets
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from . import tensor_wire
from .errors import RpcError
from . import interventions, user_fn
from .interventions import encode_ops


def tensor_from_wire(body: dict, frame) -> Any:
    """One DATA item of model.forward ({dtype, shape}) and its attachment as a
    torch tensor (when torch imports) or a numpy array, read-only memory shared
    with the frame. Without torch, bfloat16 becomes a float32 numpy array (numpy
    has no bfloat16): a copy, exact, since every bfloat16 is a float32.
    tensor_wire.TensorWireError when dtype, shape and the frame's size disagree."""
    return tensor_wire.tensor_from_bytes(body["dtype"], body["shape"], frame, tensor_wire.optional_module("torch"))


class Model:
    """A handle on one model of the model host, by name (made by client.model(name))."""

    def __init__(self, client, name: str):
        self.client = client
        self.name = name

    def state(self) -> dict:
        """This model's entry of model.list: {name, state: loading|ready|failed, bytes_loaded, ...}.
        Raises RpcError not_found when the host has no model of this name."""
        for entry in self.client.models():
            if entry.get("name") == self.name:
                return entry
        raise RpcError("not_found", "no model named %r" % self.name)

    def wait_ready(self, timeout: Optional[float] = None, poll: float = 0.1) -> dict:
        """Waits until the model is ready (also while the model host starts or restarts);
        RpcError `unavailable` with modeld's reason when it failed to load,
        `deadline_exceeded` when timeout (s) runs out."""
        give_up = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                entry = self.state()
            except RpcError as error:
                # The model host itself is (re)starting: its models load once it answers.
                if error.code != "unavailable" or not self.client.model_host_starting():
                    raise
                entry = {"state": "loading"}
            if entry.get("state") == "ready":
                return entry
            if entry.get("state") == "failed":
                raise RpcError("unavailable", "model %r failed to load: %s" % (self.name, entry.get("error", "?")))
            if give_up is not None and time.monotonic() > give_up:
                raise RpcError("deadline_exceeded", "model %r still loading after %g s (%s of %s bytes)"
                               % (self.name, timeout, entry.get("bytes_loaded"), entry.get("bytes_total")))
            time.sleep(poll)

    def info(self) -> dict:
        return self.client.call("model.info", model=self.name)

    def stats(self) -> dict:
        """How the model runs: {"attention": {"prefill", "decode"}}, the attention kernel PyTorch picked."""
        return self.client.call("model.stats", model=self.name)

    def hooks(self) -> List[dict]:
        """Every hook point ops and captures can name, in forward order, as TransformerLens names
        them: [{"name": "blocks.0.hook_resid_post", "shape": ["batch", "pos", 64]}, ...]; "opt_in": True
        marks the points run_with_cache leaves out unless named (attn.hook_result)."""
        return self.client.call("model.hooks", model=self.name)["hooks"]

    def tokenize(self, text: str, add_special_tokens: Optional[bool] = None) -> dict:
        """{"ids": [...], "offsets": [[begin, end], ...]} (byte offsets into text's UTF-8)."""
        params = {"model": self.name, "text": text}
        if add_special_tokens is not None:
            params["add_special_tokens"] = add_special_tokens
        return self.client.call("model.tokenize", params=params)

    def chat_template(self, messages: Sequence, add_generation_prompt: bool = False, tools: Optional[Sequence] = None,
                      template_name: Optional[str] = None, **template_kwargs) -> dict:
        """The conversation (a list of {"role", "content", ...}, or a list of them) rendered with
        the model's chat template as transformers' apply_chat_template renders it, and its ids:
        {"text", "ids"} (lists for a batch). Extra keyword arguments are template variables
        (e.g. enable_thinking=False). docs/chat_templates.md lists the supported Jinja."""
        params = _chat_params(messages, add_generation_prompt, tools, template_name, template_kwargs)
        params["model"] = self.name
        return self.client.call("model.chat_template", params=params)

    def detokenize(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.client.call("model.detokenize", model=self.name, ids=_ids(ids),
                                skip_special_tokens=skip_special_tokens)["text"]

    def forward(self, ids=None, text=None, last_only: bool = False, logits_dtype: str = "float32",
                add_special_tokens: Optional[bool] = None, timeout: Optional[float] = None) -> dict:
        """Logits for token ids (a list, or a list of lists: a batch, left-padded) or text
        (a str or a list of them). Returns the RESULT ({"lengths", "padding", "tensors"})
        with each tensor under its name: "logits" of shape [batch, positions, vocab]
        ([batch, 1, vocab] with last_only). logits_dtype "model" keeps the model's dtype."""
        params: Dict[str, Any] = {"model": self.name, "last_only": last_only, "logits_dtype": logits_dtype}
        if (ids is None) == (text is None):
            raise ValueError("forward: give ids or text (one of them)")
        if ids is not None:
            params["ids"] = _ids(ids)
        else:
            params["text"] = text
        if add_special_tokens is not None:
            params["add_special_tokens"] = add_special_tokens
        tensors = {}
        with self.client.stream("model.forward", timeout=timeout, params=params) as stream:
            for body, frames in stream:
                tensors[body["name"]] = tensor_from_wire(body, frames[body.get("attachment", 0)])
            result = dict(stream.result)
        result.update(tensors)
        return result

    def run(self, ids=None, text=None, ops: Sequence[dict] = (), capture: Sequence[str] = (),
            add: Optional[Dict[str, Any]] = None, logits_dtype: str = "float32",
            grad_of: Optional[dict] = None, last_only: bool = False, timeout: Optional[float] = None,
            hooks: Optional[Dict[str, Any]] = None) -> dict:
        """A forward pass with interventions (hooks/README.md), in one round trip:
        ops applied in order at their hook points (tensor fields may be numpy
        arrays or torch tensors), add={hook: (vector, scale)} steering first,
        capture=[hook, ...] last. Returns the RESULT with "logits" and
        "captures" (a list of (hook, tensor) in op order); each captured tensor
        is also under its hook name (the last capture of a name wins). With
        capture_grad ops and grad_of (e.g. {"logit_diff": {"tokens": [a, b]}}),
        "grads" lists (hook, gradient) and "grad_of_value" is the scalar.
        last_only: the logits of the last position only (what a capture run
        that wants the activations needs; ln_final and logits ops see 1 position).
        hooks={hook: fn}: the caller's functions at hook points (fn ops after ops, before
        capture; user_fn.py): each is scripted once, loaded once per client under its content
        name sha256:HASH (model.fn_load, which checks the name against the archive) and named
        by it; what they return to capture is under "HOOK:NAME"."""
        return self._with_fns(list(ops) + user_fn.hook_ops(hooks),
                              lambda named: self._run(ids, text, named, capture, add, logits_dtype, grad_of, last_only, timeout))

    def _with_fns(self, ops: list, call):
        """call(ops with each fn op's function replaced by the name it is loaded under); once
        more after loading again when the model host no longer has one (it restarted, or
        someone unloaded it)."""
        for attempt in range(2):
            named, archives = self._load_fns(ops)
            try:
                return call(named)
            except RpcError as error:
                gone = [n for n in archives if 'no function "%s"' % n in error.message]
                if attempt or not gone:
                    raise
                self.client.__dict__["_gpubox_loaded_fns"].difference_update((self.name, n) for n in gone)

    def _load_fns(self, ops: list):
        """(ops with fn ops naming their functions by hash, {name: archive}), loading (model.fn_load)
        those this client has not loaded yet."""
        loaded = self.client.__dict__.setdefault("_gpubox_loaded_fns", set())
        archives, named = {}, []
        for op in ops:
            if op.get("op") == "fn" and not isinstance(op.get("fn"), (str, dict)):
                data = user_fn.archive(op["fn"])
                op = dict(op, fn=user_fn.name_of(data))
                archives[op["fn"]] = data
            named.append(op)
        for name, data in archives.items():
            if (self.name, name) not in loaded:
                self._load_checked(name, data, {})
                loaded.add((self.name, name))
        return named, archives

    def fn_session(self) -> str:
        """The session this client's fn calls send (one per client, a random secret): the
        names it loads are its own unless shared (hooks/README.md, "fn")."""
        return self.client.__dict__.setdefault("_gpubox_fn_session", secrets.token_hex(16))

    def _load_checked(self, name: str, data: bytes, extra: dict) -> dict:
        """model.fn_load of data under name, and a check that what the host holds under it
        is data (its answer's sha256), never taken on trust."""
        answer = self.client.call("model.fn_load", params=dict({"model": self.name, "name": name, "session": self.fn_session()},
                                                               **extra), attachments=[data])
        want = hashlib.sha256(data).hexdigest()
        if answer.get("sha256") != want:
            raise RpcError("input_changed", "model.fn_load %s: the model host holds a function of sha256:%s under it, "
                           "not this archive (sha256:%s)" % (name, answer.get("sha256"), want))
        return answer

    def fn_load(self, name: str, fn, shared: bool = False) -> dict:
        """Loads fn (a callable, scripted function or module, or archive bytes) under name for
        this model: this client's ops then name it ({"op": "fn", "fn": name}); with shared, every
        caller's (only this client unloads it). {"name", "bytes", "sha256", "scope"}; a name
        already taken is RpcError already_exists naming the sha256 of what holds it."""
        return self._load_checked(name, user_fn.archive(fn), {"shared": True} if shared else {})

    def fn_unload(self, name: str) -> None:
        self.client.call("model.fn_unload", model=self.name, name=name, session=self.fn_session())

    def fns(self) -> List[dict]:
        """The functions this client's calls can name: [{"name", "bytes", "sha256", "scope"}]."""
        return self.client.call("model.fns", model=self.name, session=self.fn_session())["fns"]

    def _fn_session_param(self, ops) -> dict:
        """{"session": ...} when an op names a loaded function, else {}."""
        return {"session": self.fn_session()} if any(op.get("op") == "fn" and isinstance(op.get("fn"), str) for op in ops) else {}

    def _run(self, ids, text, ops, capture, add, logits_dtype, grad_of, last_only, timeout) -> dict:
        wire, attachments = encode_ops(ops, capture, add)
        params: Dict[str, Any] = {"model": self.name, "ops": wire, "logits_dtype": logits_dtype}
        params.update(self._fn_session_param(ops))
        if last_only:
            params["last_only"] = True
        if grad_of is not None:
            params["grad_of"] = grad_of
        if (ids is None) == (text is None):
            raise ValueError("run: give ids or text (one of them)")
        if ids is not None:
            params["ids"] = _ids(ids)
        else:
            params["text"] = text
        captures = []
        with self.client.stream("model.run", timeout=timeout, params=params, attachments=attachments) as stream:
            for body, frames in stream:
                captures.append((body["name"], tensor_from_wire(body, frames[body.get("attachment", 0)])))
            result = dict(stream.result)
        result["logits"] = captures[0][1]
        result["captures"] = [(n, t) for n, t in captures[1:] if not n.startswith("grad:")]
        result["grads"] = [(n[len("grad:"):], t) for n, t in captures[1:] if n.startswith("grad:")]
        result.update(dict(captures[1:]))
        return result

    def sae(self, name: str, path: Optional[str] = None, hook: Optional[str] = None) -> "Sae":
        """A handle on the SAE `name` of this model; with path (a directory in SAELens' format:
        cfg.json + sae_weights.safetensors) it is loaded first (model.sae_load; hook defaults
        to cfg.json's hook_name). The handle makes the SAE ops and runs captures."""
        if path is not None:
            params = {"model": self.name, "name": name, "path": path}
            if hook is not None:
                params["hook"] = hook
            self.client.call("model.sae_load", params=params)
        return Sae(self, name)

    def saes(self) -> List[dict]:
        """The loaded SAEs: [{name, hook, architecture, d_in, d_sae, k?, normalize_activations, ...}]."""
        return self.client.call("model.saes", model=self.name)["saes"]

    def weights(self, names: Optional[Sequence[str]] = None, dtype: Optional[str] = None,
                timeout: Optional[float] = None):
        """Parameters in TransformerLens' names and shapes (W_E, W_pos, W_U,
        blocks.L.attn.W_Q/W_K/W_V/W_O, blocks.L.mlp.W_in/W_out, ln_final.w, ...), raw (no
        weight processing): a dict name → tensor, float32 unless dtype ("bfloat16",
        "float16") is given. A str gives that one tensor; no names gives the list of names."""
        if names is None:
            return self.client.call("model.weights", model=self.name)["names"]
        single = isinstance(names, str)
        params: Dict[str, Any] = {"model": self.name, "names": [names] if single else list(names)}
        if dtype is not None:
            params["dtype"] = dtype
        tensors = {}
        with self.client.stream("model.weights", timeout=timeout, params=params) as stream:
            for body, frames in stream:
                tensors[body["name"]] = tensor_from_wire(body, frames[body.get("attachment", 0)])
        return tensors[names] if single else tensors

    def run_with_cache(self, ids=None, text=None, names=None, timeout: Optional[float] = None):
        """TransformerLens' run_with_cache: (logits, cache), the cache a dict of every hook
        point's activation by name (float32), or of those in `names` (a list, or a function
        of the name that says which to keep). One round trip; memory grows with the prompt.
        Opt-in points (model.hooks marks them: attn.hook_result, d_model wide per head) are
        cached only when the list names them, as TransformerLens caches hook_result only
        with use_attn_result."""
        points = [h["name"] for h in self.hooks() if h["name"] != "logits" and not h.get("opt_in")]
        if callable(names):
            points = [n for n in points if names(n)]
        elif names is not None:
            points = list(names)
        result = self.run(ids=ids, text=text, capture=points, timeout=timeout)
        return result["logits"], dict(result["captures"])

    def trace(self, ids=None, text=None, timeout: Optional[float] = None, grad_of: Optional[dict] = None) -> "Trace":
        """nnsight-style: ops recorded in a with block, run in one round trip when it ends.

            with model.trace(ids) as t:
                t.add("blocks.3.hook_resid_post", vector, scale=4.0)
                saved = t["blocks.5.hook_resid_post"].save()
            saved.value, t.logits

        With grad_of (as run() takes it), point.grad() saves the gradient of that scalar
        with respect to the point; t.result["grad_of_value"] is the scalar."""
        return Trace(self, ids, text, timeout, grad_of)

    def generate(self, prompt: Union[str, Sequence, None] = None, timeout: Optional[float] = None,
                 ops: Sequence[dict] = (), capture: Sequence[str] = (), add: Optional[Dict[str, Any]] = None,
                 hooks: Optional[Dict[str, Any]] = None, **options) -> dict:
        """Generates from a prompt (text, a list of ids, or a batch of either). Options as
        model.generate takes them: max_new_tokens, temperature, top_k, top_p, seed, stop
        (strings), stop_ids, ignore_eos; or messages=[{"role", "content"}, ...] in place of the
        prompt (rendered with the model's chat template, add_generation_prompt true unless
        given; tools, template_name and template_kwargs as chat_template() takes them).
        Returns {"tokens", "text"?, "finish_reason", "prompt_tokens"}, and "max_new_tokens_cut":
        {"asked", "allowed", "context_length"} when the model's context allowed fewer new tokens.
        ops / capture / add as for run(), applied at every forward pass (an op's
        "steps": [pass, ...] limits it: 0 is the prompt's pass, k the one that picks
        token k); then "captures" holds (pass, hook, tensor) in the order produced.
        hooks as for run(), at every pass ((fn, {"steps": [...]}) limits one)."""
        ops = list(ops) + user_fn.hook_ops(hooks)
        if any(op.get("op") == "fn" and not isinstance(op.get("fn"), (str, dict)) for op in ops):
            return self._with_fns(ops, lambda named: self.generate(prompt, timeout, named, capture, add, **options))
        params, attachments = self._generate_params(prompt, options, ops, capture, add)
        if not attachments and "ops" not in params:
            return self.client.call("model.generate", timeout=timeout, params=params)
        captures = []
        with self.client.stream("model.generate", timeout=timeout, params=params, attachments=attachments) as stream:
            for body, frames in stream:
                captures.append((body["step"], body["name"], tensor_from_wire(body, frames[body.get("attachment", 0)])))
            result = dict(stream.result)
        result["captures"] = captures
        return result

    def generate_stream(self, prompt: Union[str, Sequence, None] = None, timeout: Optional[float] = None,
                        ops: Sequence[dict] = (), capture: Sequence[str] = (), add: Optional[Dict[str, Any]] = None,
                        hooks: Optional[Dict[str, Any]] = None, **options) -> Iterator[dict]:
        """Like generate(), but yields each step as it is produced: {"step", "tokens": [one per
        row, -1 for a finished row], "text"?: [delta per row]}, and each capture as it is
        made: {"step": pass, "name": hook, "tensor"}. The RESULT is the generator's
        return value (StopIteration.value). Closing the generator cancels the generation."""
        ops, _ = self._load_fns(list(ops) + user_fn.hook_ops(hooks))
        params, attachments = self._generate_params(prompt, options, ops, capture, add)
        params["stream"] = True
        with self.client.stream("model.generate", timeout=timeout, params=params, attachments=attachments) as stream:
            for body, frames in stream:
                if "name" in body:
                    yield {"step": body["step"], "name": body["name"],
                           "tensor": tensor_from_wire(body, frames[body.get("attachment", 0)])}
                else:
                    yield body
            return stream.result

    def _generate_params(self, prompt, options: dict, ops=(), capture=(), add=None):
        """(params, attachments) of a model.generate call."""
        params = {"model": self.name}
        if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and isinstance(prompt[0], str)):
            params["text"] = prompt
        elif prompt is not None:
            params["ids"] = _ids(prompt)
        params.update(options)
        if "messages" in params:  # as JSON text: the key order reaches the template
            chat = _chat_params(params.pop("messages"), params.pop("add_generation_prompt", True), params.pop("tools", None),
                                params.pop("template_name", None), params.pop("template_kwargs", {}))
            params.update(chat)
        attachments = []
        if ops or capture or add:
            params["ops"], attachments = encode_ops(ops, capture, add)
            params.update(self._fn_session_param(ops))
        return params, attachments


class Sae:
    """An SAE loaded into the model host for one model (Model.sae): its ops for run(),
    generate() and trace ops, and encode() — a capture in one round trip.

        sae = model.sae("res1", path="/saes/res1")
        top = sae.encode(ids=prompt, top_k=16)      # {"indices", "values", "logits"}
        model.generate("Hi", ops=[sae.steer([123], scale=8.0)])
    """

    def __init__(self, model: Model, name: str):
        self.model, self.name = model, name

    def info(self) -> dict:
        for entry in self.model.saes():
            if entry["name"] == self.name:
                return entry
        raise RpcError("not_found", "no SAE named %r on model %r" % (self.name, self.model.name))

    def unload(self) -> None:
        self.model.client.call("model.sae_unload", model=self.model.name, sae=self.name)

    def capture(self, top_k: Optional[int] = None, **where) -> dict:
        return interventions.sae_capture(self.name, top_k, **where)

    def steer(self, features, scale: float = 1.0, **where) -> dict:
        return interventions.sae_steer(self.name, features, scale, **where)

    def ablate(self, features, **where) -> dict:
        return interventions.sae_ablate(self.name, features, **where)

    def set(self, features, values, **where) -> dict:
        return interventions.sae_set(self.name, features, values, **where)

    def splice(self, **where) -> dict:
        return interventions.sae_splice(self.name, **where)

    def encode(self, ids=None, text=None, top_k: Optional[int] = None, ops: Sequence[dict] = (),
               timeout: Optional[float] = None, **where) -> dict:
        """Runs the prompt and returns its feature activations at the SAE's hook: {"acts"} dense,
        or {"indices", "values"} with top_k (largest first), and "logits"."""
        result = self.model.run(ids=ids, text=text, ops=list(ops) + [self.capture(top_k, **where)],
                                last_only=True, timeout=timeout)
        key = "sae:" + self.name
        out = {"logits": result["logits"]}
        if top_k is None:
            out["acts"] = result[key]
        else:
            out["indices"], out["values"] = result[key + ":indices"], result[key + ":values"]
        return out


class Saved:
    """A capture asked for in a trace; .value once the trace has run."""

    def __init__(self):
        self.value = None


class _Point:
    """A hook point in a trace: .save() captures it; the op methods edit it."""

    def __init__(self, trace: "Trace", hook: str, where: dict):
        self._trace, self._hook, self._where = trace, hook, where

    def __getitem__(self, selection) -> "_Point":
        """point[rows, positions] or point[:, positions, heads]: each a list or int (":" for all)."""
        selection = selection if isinstance(selection, tuple) else (selection,)
        where = dict(self._where)
        for key, value in zip(("rows", "positions", "heads"), selection):
            if isinstance(value, slice) and value == slice(None):
                continue
            where[key] = [value] if isinstance(value, int) else list(value)
        return _Point(self._trace, self._hook, where)

    def save(self, dtype: str = "float32") -> Saved:
        saved = Saved()
        self._trace._op({"op": "capture", "dtype": dtype}, self, saved)
        return saved

    def grad(self) -> Saved:
        """The gradient of the trace's grad_of scalar with respect to this point (float32)."""
        if self._trace._grad_of is None:
            raise ValueError("grad(): give the trace grad_of, e.g. model.trace(ids, grad_of={'logit_diff': {'tokens': [a, b]}})")
        saved = Saved()
        self._trace._op({"op": "capture_grad"}, self, saved)
        return saved

    def add(self, vector, scale: float = 1.0):
        self._trace._op({"op": "add", "vector": vector, "scale": scale}, self)

    def set(self, value):
        self._trace._op({"op": "set", "value": value}, self)

    def scale(self, factor: float):
        self._trace._op({"op": "scale", "factor": factor}, self)

    def zero(self):
        self._trace._op({"op": "zero"}, self)

    def mean(self, value):
        self._trace._op({"op": "mean", "value": value}, self)

    def project_out(self, direction):
        self._trace._op({"op": "project_out", "direction": direction}, self)

    def patch(self, value=None, from_row: Optional[int] = None):
        op = {"op": "patch"}
        if value is not None:
            op["value"] = value
        if from_row is not None:
            op["from_row"] = from_row
        self._trace._op(op, self)


class Trace:
    """The ops of a `with model.trace(...)` block, run by model.run when the block ends."""

    def __init__(self, model: Model, ids, text, timeout, grad_of=None):
        self._model, self._ids, self._text, self._timeout, self._grad_of = model, ids, text, timeout, grad_of
        self._ops, self._saved, self._grads = [], [], []
        self.logits = None
        self.result = None

    def __getitem__(self, hook: str) -> _Point:
        return _Point(self, hook, {})

    def add(self, hook: str, vector, scale: float = 1.0):
        self[hook].add(vector, scale)

    def _op(self, op: dict, point: _Point, saved: Optional[Saved] = None):
        op = dict(op, hook=point._hook, **point._where)
        self._ops.append(op)
        if saved is not None:
            (self._grads if op["op"] == "capture_grad" else self._saved).append(saved)

    def __enter__(self) -> "Trace":
        return self

    def __exit__(self, kind, value, tb):
        if kind is not None:
            return False
        self.result = self._model.run(ids=self._ids, text=self._text, ops=self._ops, timeout=self._timeout,
                                      grad_of=self._grad_of)
        self.logits = self.result["logits"]
        for saved, (_, tensor) in zip(self._saved, self.result["captures"]):
            saved.value = tensor
        for saved, (_, tensor) in zip(self._grads, self.result["grads"]):
            saved.value = tensor
        return False


def _chat_params(messages, add_generation_prompt, tools, template_name, template_kwargs) -> dict:
    """The conversation fields of a call, as JSON text so that object keys keep their order
    (the model host decodes msgpack maps with sorted keys; tojson prints keys as given)."""
    params: Dict[str, Any] = {"messages": json.dumps(list(messages), ensure_ascii=False),
                              "add_generation_prompt": bool(add_generation_prompt)}
    if tools is not None:
        params["tools"] = json.dumps(list(tools), ensure_ascii=False)
    if template_name is not None:
        params["template_name"] = template_name
    if template_kwargs:
        params["template_kwargs"] = json.dumps(dict(template_kwargs), ensure_ascii=False)
    return params


def _ids(ids, where: str = "ids") -> List:
    """Token ids as plain ints (accepts lists, tuples, numpy arrays and torch tensors of
    integers); ValueError naming the first that is not an integer (1.5 is not token 1)."""
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    out = []
    for i, item in enumerate(ids):
        at = "%s[%d]" % (where, i)
        if isinstance(item, (list, tuple)):
            out.append(_ids(item, at))
        elif isinstance(item, numbers.Integral) and not isinstance(item, bool):
            out.append(int(item))
        else:
            raise ValueError("%s: %r is not a token id (token ids are integers)" % (at, item))
    return out
