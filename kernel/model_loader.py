# gpubox model loader: loads the preloaded models of config kernel.models in
# the executor, as hidden setup code at every start and restart.
#
# The agent runs load_models(entries, display, mime) with one entry per model
# ({var_name, tokenizer_var, loader, device, dtype, hidden, is_peft, path,
# base_model, name (not for hidden models), error (set when the agent already
# knows it cannot be loaded)}). Each model loads on its own: one that fails is
# reported and the others still load. load_models returns the names to bind in
# the user namespace (var_name, tokenizer_var, model_info) and sends its
# report as one display of the given MIME type, which the agent keeps for
# kernel.info. A hidden model's name and configured path never reach this code.
import json
import os
import struct
import sys
import time

MAX_HEADER_BYTES = 100 * 1024 * 1024  # a safetensors header larger than this is refused
MAX_ERROR_CHARS = 2000


class LoadError(Exception):
    """A model cannot be loaded; the message says why and what to do."""


class SafetensorsError(ValueError):
    """A safetensors file is not well formed; the message says where."""


# safetensors dtype: (torch dtype name, bytes per element)
SAFETENSORS_DTYPES = {
    "F64": ("float64", 8), "F32": ("float32", 4), "F16": ("float16", 2), "BF16": ("bfloat16", 2),
    "I64": ("int64", 8), "I32": ("int32", 4), "I16": ("int16", 2), "I8": ("int8", 1),
    "U8": ("uint8", 1), "BOOL": ("bool", 1),
}


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _no_duplicates(pairs):
    result = {}
    for key, value in pairs:
        if key in result:
            raise SafetensorsError("header: key %r appears twice" % key)
        result[key] = value
    return result


def read_safetensors_header(f, file_size):
    """Reads and validates the header of a safetensors file open at offset 0.

    Returns (entries, metadata, data_start): entries are (name, dtype, shape,
    begin, end) in header order, offsets relative to data_start. The tensors
    must tile the data exactly (no gap, no overlap, nothing left over), as the
    reference implementation requires.
    """
    if file_size < 8:
        raise SafetensorsError("the file is %d bytes, shorter than the 8-byte header length" % file_size)
    (header_len,) = struct.unpack("<Q", f.read(8))
    if header_len > MAX_HEADER_BYTES:
        raise SafetensorsError("header length %d is over the limit of %d bytes" % (header_len, MAX_HEADER_BYTES))
    if header_len > file_size - 8:
        raise SafetensorsError("header length %d runs past the end of the %d-byte file" % (header_len, file_size))
    raw = f.read(header_len)
    if len(raw) != header_len:
        raise SafetensorsError("the file ended inside its header")
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except UnicodeDecodeError as error:
        raise SafetensorsError("header is not UTF-8: %s" % error) from None
    except SafetensorsError:
        raise
    except ValueError as error:
        raise SafetensorsError("header is not JSON: %s" % error) from None
    if not isinstance(header, dict):
        raise SafetensorsError("header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    if metadata is not None:
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            raise SafetensorsError("__metadata__: expected an object of strings")
    data_len = file_size - 8 - header_len
    entries = []
    for name, info in header.items():
        where = "tensor %r" % name
        if not isinstance(info, dict):
            raise SafetensorsError("%s: expected an object with dtype, shape and data_offsets" % where)
        unknown = sorted(set(info) - {"dtype", "shape", "data_offsets"})
        if unknown:
            raise SafetensorsError("%s: unknown key %r" % (where, unknown[0]))
        dtype = info.get("dtype")
        if dtype not in SAFETENSORS_DTYPES:
            raise SafetensorsError("%s: dtype %r is not one of %s" % (where, dtype, ", ".join(SAFETENSORS_DTYPES)))
        shape = info.get("shape")
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            raise SafetensorsError("%s: shape must be a list of integers >= 0, got %r" % (where, shape))
        offsets = info.get("data_offsets")
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_int(o) for o in offsets)
                or not 0 <= offsets[0] <= offsets[1]):
            raise SafetensorsError("%s: data_offsets must be [begin, end] with 0 <= begin <= end, got %r"
                                   % (where, offsets))
        begin, end = offsets
        if end > data_len:
            raise SafetensorsError("%s: data_offsets [%d, %d] run past the %d bytes of data"
                                   % (where, begin, end, data_len))
        count = 1
        for d in shape:
            count *= d
        needed = count * SAFETENSORS_DTYPES[dtype][1]
        if end - begin != needed:
            raise SafetensorsError("%s: data_offsets [%d, %d] hold %d bytes; dtype %s with shape %s needs %d"
                                   % (where, begin, end, end - begin, dtype, shape, needed))
        entries.append((name, dtype, shape, begin, end))
    at = 0
    for name, dtype, shape, begin, end in sorted(entries, key=lambda e: (e[3], e[4])):
        if begin != at:
            raise SafetensorsError("tensor %r: data starts at byte %d, expected %d (tensors must tile the data "
                                   "without gaps or overlaps)" % (name, begin, at))
        at = end
    if at != data_len:
        raise SafetensorsError("the tensors cover %d bytes of data, but the file holds %d" % (at, data_len))
    return entries, metadata or {}, 8 + header_len


def read_safetensors(path, torch):
    """The tensors of a safetensors file as {name: tensor} (on the CPU, in header order), and its metadata."""
    if sys.byteorder != "little":
        raise SafetensorsError("safetensors data is little-endian; this machine is not")
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        entries, metadata, data_start = read_safetensors_header(f, size)
        tensors = {}
        for name, dtype, shape, begin, end in entries:
            torch_dtype = getattr(torch, SAFETENSORS_DTYPES[dtype][0])
            if begin == end:
                tensors[name] = torch.empty(shape, dtype=torch_dtype)
                continue
            buffer = bytearray(end - begin)
            f.seek(data_start + begin)
            if f.readinto(buffer) != len(buffer):
                raise SafetensorsError("tensor %r: the file ended inside its data (changed while being read?)" % name)
            tensors[name] = torch.frombuffer(buffer, dtype=torch_dtype).reshape(shape)
    return tensors, metadata


# ---------------------------------------------------------------- loaders

def _import_torch():
    try:
        import torch
    except ImportError as error:
        raise LoadError("needs PyTorch in the kernel's Python (import torch failed: %s)" % error) from None
    return torch


def _device(torch, name):
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise LoadError("device %r was requested, but no CUDA GPU is available to this kernel "
                            "(torch.cuda.is_available() is False); use \"device\": \"cpu\"" % name)
        index = int(name.split(":", 1)[1]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            raise LoadError("device %r was requested, but only %d CUDA device(s) are visible"
                            % (name, torch.cuda.device_count()))
    return torch.device(name)


def _dtype(torch, name):
    return getattr(torch, name) if name else None


def load_torchscript(entry, torch):
    device = _device(torch, entry["device"])
    dtype = _dtype(torch, entry["dtype"])
    model = torch.jit.load(entry["path"], map_location=device)
    if dtype is not None:
        model = model.to(dtype)
    model.eval()
    return model, None


def load_safetensors(entry, torch):
    """A state dict: {name: tensor} on the device; dtype converts floating-point tensors only."""
    device = _device(torch, entry["device"])
    dtype = _dtype(torch, entry["dtype"])
    tensors, _ = read_safetensors(entry["path"], torch)
    for name, tensor in tensors.items():
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        tensors[name] = tensor.to(device)
    return tensors, None


def _auto_model(transformers, source, kwargs):
    try:
        return transformers.AutoModelForCausalLM.from_pretrained(source, **kwargs)
    except ValueError:  # not a causal LM architecture: the bare model
        return transformers.AutoModel.from_pretrained(source, **kwargs)


def _hide_adapter_origin(model, loaded_base):
    """A hidden adapter's config names the base it was trained on (adapter_config.json's
    base_model_name_or_path, which may reveal it): replaced by the base this kernel loaded."""
    for config in (getattr(model, "peft_config", None) or {}).values():
        if getattr(config, "base_model_name_or_path", None) is not None:
            config.base_model_name_or_path = loaded_base


def load_transformers(entry, torch):
    device = _device(torch, entry["device"])
    dtype = _dtype(torch, entry["dtype"])
    try:
        import transformers
    except ImportError as error:
        raise LoadError("the transformers loader needs the transformers package in the kernel's Python "
                        "(import failed: %s)" % error) from None
    kwargs = {"torch_dtype": dtype} if dtype is not None else {}
    tokenizer_sources = [entry["path"]]
    if entry["is_peft"]:
        try:
            import peft
        except ImportError as error:
            raise LoadError("is_peft needs the peft package in the kernel's Python (import failed: %s)"
                            % error) from None
        base = _auto_model(transformers, entry["base_model"], kwargs)
        model = peft.PeftModel.from_pretrained(base, entry["path"])
        if entry["hidden"]:
            _hide_adapter_origin(model, entry["base_model"])
        tokenizer_sources.append(entry["base_model"])  # adapters often ship without a tokenizer
    else:
        model = _auto_model(transformers, entry["path"], kwargs)
    model = model.to(device)
    model.eval()
    tokenizer = None
    if entry["tokenizer_var"]:
        failure = None
        for source in tokenizer_sources:
            try:
                tokenizer = transformers.AutoTokenizer.from_pretrained(source)
                break
            except (OSError, ValueError) as error:
                failure = error
        if tokenizer is None:
            raise LoadError("the model loaded, but its tokenizer did not: %s: %s" % (type(failure).__name__, failure))
    return model, tokenizer


LOADERS = {"torchscript": load_torchscript, "safetensors": load_safetensors, "transformers": load_transformers}


# ---------------------------------------------------------------- report

def _summary(values, fallback):
    values = sorted(set(values))
    if not values:
        return fallback
    return values[0] if len(values) == 1 else "mixed (%s)" % ", ".join(values)


def describe(obj):
    """{type, device, dtype, parameters} of a loaded model (a module or a dict of tensors)."""
    if isinstance(obj, dict):
        tensors = list(obj.values())
        kind = "dict of %d tensors" % len(tensors)
    else:
        tensors = list(obj.parameters()) if hasattr(obj, "parameters") else []
        kind = type(obj).__name__
        original = getattr(obj, "original_name", None)  # a TorchScript module's own class
        if isinstance(original, str) and original and original != kind:
            kind = "%s (%s)" % (kind, original)
    return {"type": kind,
            "device": _summary((str(t.device) for t in tensors), "none"),
            "dtype": _summary((str(t.dtype) for t in tensors), "none"),
            "parameters": int(sum(t.numel() for t in tensors))}


def _error_text(error, entry):
    text = "%s: %s" % (type(error).__name__, error) if not isinstance(error, LoadError) else str(error)
    if entry.get("hidden"):  # keep even the placed path out of what the kernel shows
        for path in (entry.get("path"), entry.get("base_model")):
            if path:
                text = text.replace(path, "<hidden>")
    return text[:MAX_ERROR_CHARS]


def load_one(entry):
    """(report item, {name: value} to bind) for one model; never raises."""
    item = {"var_name": entry["var_name"], "loader": entry["loader"], "hidden": bool(entry["hidden"]),
            "device": entry["device"]}
    if entry.get("tokenizer_var"):
        item["tokenizer_var"] = entry["tokenizer_var"]
    if not entry["hidden"]:
        item["name"] = entry.get("name", "")
        item["path"] = entry["path"]
    if entry.get("error"):
        item.update(status="failed", error=entry["error"])
        return item, {}
    started = time.monotonic()
    try:
        torch = _import_torch()
        model, tokenizer = LOADERS[entry["loader"]](entry, torch)
    except Exception as error:
        item.update(status="failed", error=_error_text(error, entry))
        import gc
        gc.collect()
        return item, {}
    item.update(status="loaded", load_seconds=round(time.monotonic() - started, 3))
    item.update(describe(model))
    values = {entry["var_name"]: model}
    if tokenizer is not None:
        item["tokenizer_type"] = type(tokenizer).__name__
        values[entry["tokenizer_var"]] = tokenizer
    return item, values


def format_model_info(report):
    """The "Pre-loaded Models" text: one block per model; a hidden one shows neither name nor path."""
    if not report:
        return "Pre-loaded Models: none"
    lines = ["Pre-loaded Models:"]
    for item in report:
        if item["hidden"]:
            title = "hidden model (%s)" % item["loader"]
        else:
            title = "%s (%s, %s)" % (item["name"], item["loader"], item["path"])
        lines.append("- %s: %s" % (item["var_name"], title))
        if item["status"] != "loaded":
            lines.append("    FAILED to load: %s" % item.get("error", item["status"]))
            continue
        lines.append("    type: %s; device: %s; parameters: %s; dtype: %s"
                     % (item["type"], item["device"], format(item["parameters"], ","), item["dtype"]))
        if "tokenizer_type" in item:
            lines.append("    tokenizer: %s (%s)" % (item["tokenizer_var"], item["tokenizer_type"]))
    return "\n".join(lines)


class ModelInfo(str):
    """The model_info text; shown as text (not a quoted string) when a cell ends with it."""

    def __repr__(self):
        return str(self)


def load_models(entries, display=None, mime="application/vnd.gpubox.models+json"):
    """Loads every entry; returns the names to bind in the user namespace, model_info included."""
    report, namespace = [], {}
    for entry in entries:
        item, values = load_one(entry)
        report.append(item)
        namespace.update(values)
    text = format_model_info(report)
    namespace["model_info"] = ModelInfo(text)
    if display is not None:
        try:
            display({mime: {"models": report, "model_info": text}}, raw=True)
        except Exception:
            pass
    return namespace
