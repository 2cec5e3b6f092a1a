"""The bandwidth limit of batch-1 decode, and the targets against it. The
limit is the bytes one decode step reads from a checkpoint's weights divided
by the memory bandwidth (ms/token = bytes / bytes per second).

A step reads every weight once, except the embedding tables: of those it
reads one row per token (the token's, and the position's where there is a
position table). The lm_head is read whole; a tied lm_head is the token
table itself, so there the table is counted once, whole. The KV cache is not
counted: at batch 1 and a short context it is a few MB against GBs of
weights (Llama 3 8B, 80 positions: 10 MB against 16 GB).

Read from the safetensors headers alone (no tensor is loaded), so it costs
milliseconds even on 16 GB.
"""
import json
import os
import struct

# Names of embedding tables read one row per token, by their last two parts.
TOKEN_TABLES = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight")
POSITION_TABLES = ("wpe.weight", "embed_positions.weight", "position_embeddings.weight")
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
               "F8_E4M3": 1, "F8_E5M2": 1}


def tensors(directory):
    """{name: (dtype, shape)} of every tensor in the directory's .safetensors files."""
    found = {}
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(directory, name), "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        found.update({key: (value["dtype"], value["shape"]) for key, value in header.items() if key != "__metadata__"})
    if not found:
        raise ValueError("%s holds no .safetensors file" % directory)
    return found


RUN_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


def nbytes(dtype, shape, run_dtype=None):
    """The tensor's bytes as held: floating-point tensors cast to run_dtype where one is given."""
    count = 1
    for dim in shape:
        count *= dim
    floating = dtype.startswith(("F", "BF"))
    return count * (RUN_DTYPE_BYTES[run_dtype] if run_dtype and floating else DTYPE_BYTES[dtype])


def bytes_per_step(directory, run_dtype=None):
    """{"weight_bytes": every tensor, "read_bytes": what a batch-1 decode step reads, "tied": bool},
    with floating-point weights counted in run_dtype ("bfloat16", ...) where given, as modeld holds them."""
    found = tensors(directory)
    tied = not any(name.endswith("lm_head.weight") for name in found)
    total = read = 0
    for name, (dtype, shape) in found.items():
        size = nbytes(dtype, shape, run_dtype)
        total += size
        one_row = name.endswith(POSITION_TABLES) or (name.endswith(TOKEN_TABLES) and not tied)
        read += size // shape[0] if one_row else size
    return {"weight_bytes": total, "read_bytes": read, "tied": tied}


# The targets of batch-1 bf16 decode on Llama 3 8B's shape (issue 45), which the first GPU run answers.
LIMIT_TARGET = 0.75     # of the bandwidth limit; the moonshot is 0.85 (gpt-fast reaches about 0.83 on an A100)
LIMIT_MOONSHOT = 0.85
OVER_TRANSFORMERS = 4.0  # transformers eager's ms/token over modeld's


def verdicts(ms, limit_ms, transformers_ms=None):
    """[(what, figure, target, met)] for modeld's ms/token by decode_steps kind ({"dynamic", "fixed", "graph"}),
    the limit, and transformers eager's ms/token (None: not measured, met None). met is True, False or None."""
    best_kind = min(ms, key=ms.get)
    best = ms[best_kind]
    eager = min(ms["dynamic"], ms["fixed"])
    fraction = limit_ms / best if best > 0 else float("nan")
    rows = [("of the limit (%s steps)" % best_kind, "%.0f %%" % (100 * fraction),
             ">= %.0f %% (moonshot %.0f %%)" % (100 * LIMIT_TARGET, 100 * LIMIT_MOONSHOT), fraction >= LIMIT_TARGET),
            ("graph vs eager ms/token", "%.3f vs %.3f" % (ms["graph"], eager), "graph <= eager", ms["graph"] <= eager)]
    if transformers_ms is None:
        rows.append(("over transformers eager", "not measured", ">= %.0fx" % OVER_TRANSFORMERS, None))
    else:
        ratio = transformers_ms / best if best > 0 else float("nan")
        rows.append(("over transformers eager", "%.2fx" % ratio, ">= %.0fx" % OVER_TRANSFORMERS, ratio >= OVER_TRANSFORMERS))
    return rows


def verdict_text(rows):
    """One line: each figure, its target and whether it is met."""
    said = {True: "met", False: "NOT met", None: "-"}
    return "; ".join("%s %s (target %s: %s)" % (what, figure, target, said[met]) for what, figure, target, met in rows)
