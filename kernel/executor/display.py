"""Rich output without IPython: MIME bundles from _repr_*_ methods, display(), clear_output(); and the display frame both backends send."""

import base64

from .channel import emit

_REPR_METHODS = [
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_latex_", "text/latex"),
    ("_repr_json_", "application/json"),
    ("_repr_javascript_", "application/javascript"),
]


def _jsonable(value):
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


def plain_format(obj):
    """The MIME bundle of obj without IPython: every _repr_*_ it has, and text/plain."""
    data, metadata = {}, {}
    bundle = getattr(obj, "_repr_mimebundle_", None)
    if callable(bundle):
        try:
            result = bundle()
            if isinstance(result, tuple):
                result, metadata = result[0], dict(result[1] or {})
            for mime, value in (result or {}).items():
                data[mime] = _jsonable(value)
        except Exception:
            pass
    for method, mime in _REPR_METHODS:
        fn = getattr(obj, method, None)
        if mime in data or not callable(fn) or isinstance(obj, type):
            continue
        try:
            value = fn()
        except Exception:
            continue
        if isinstance(value, tuple):
            value, metadata[mime] = value[0], value[1]
        if value is not None:
            data[mime] = _jsonable(value)
    data.setdefault("text/plain", repr(obj))
    return data, metadata


def send_display(data, metadata=None, transient=None, update=False):
    emit({"type": "display", "data": data, "metadata": metadata or {},
          "transient": transient or {}, "update": bool(update)})


def plain_display(*objs, raw=False, display_id=None, update=False, metadata=None, **kwargs):
    transient = {"display_id": display_id} if display_id else {}
    for obj in objs:
        if raw:
            data, md = obj, {}
        else:
            data, md = plain_format(obj)
        send_display(data, dict(md, **(metadata or {})), transient, update)


def plain_clear_output(wait=False):
    emit({"type": "clear_output", "wait": bool(wait)})
