"""FUNCTION descriptions of served functions (rpc/PROTOCOL.md): signature, parameters, doc and a JSON Schema from the type hints."""

import collections.abc as abc
import inspect
import types
import typing

def annotation_text(annotation):
    if annotation is inspect.Parameter.empty:
        return None
    return inspect.formatannotation(annotation)


def schema_of(hint):
    """A JSON Schema for a type hint; {} with the hint's text for what has none."""
    if hint is inspect.Parameter.empty or hint is typing.Any:
        return {}
    if hint is None or hint is type(None):
        return {"type": "null"}
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if hint in simple:
        return {"type": simple[hint]}
    if hint in (bytes, bytearray):
        return {"type": "string", "description": "bytes"}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return schema_of(args[0])
    union_type = getattr(types, "UnionType", None)
    if origin is typing.Union or (union_type is not None and origin is union_type):
        return {"anyOf": [schema_of(arg) for arg in args]}
    if origin is typing.Literal:
        schema = {"enum": list(args)}
        kinds = {type(arg) for arg in args}
        if len(kinds) == 1 and next(iter(kinds)) in simple:
            schema["type"] = simple[next(iter(kinds))]
        return schema
    if hint in (list, set, frozenset, abc.Sequence) or origin in (list, set, frozenset, abc.Sequence, abc.Iterable):
        schema = {"type": "array"}
        if args:
            schema["items"] = schema_of(args[0])
        if origin in (set, frozenset) or hint in (set, frozenset):
            schema["uniqueItems"] = True
        return schema
    if hint is tuple or origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": schema_of(args[0])}
        if args:
            return {"type": "array", "prefixItems": [schema_of(arg) for arg in args],
                    "minItems": len(args), "maxItems": len(args)}
        return {"type": "array"}
    if hint is dict or origin in (dict, abc.Mapping):
        schema = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = schema_of(args[1])
        return schema
    return {"description": annotation_text(hint)}


def json_default(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(json_default(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and json_default(v) for k, v in value.items())
    return False


def describe(name, fn):
    signature = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:
        hints = {}
    doc = inspect.getdoc(fn) or ""
    parameters, properties, required = [], {}, []
    for param in signature.parameters.values():
        entry = {"name": param.name, "kind": param.kind.name.lower(), "annotation": annotation_text(param.annotation)}
        if param.default is not inspect.Parameter.empty:
            entry["default"] = repr(param.default)
        parameters.append(entry)
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        schema = dict(schema_of(hints.get(param.name, param.annotation)))
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
        elif json_default(param.default):
            schema["default"] = param.default if not isinstance(param.default, tuple) else list(param.default)
        properties[param.name] = schema
    input_schema = {"type": "object", "properties": properties, "required": required,
                    "additionalProperties": any(p.kind == p.VAR_KEYWORD for p in signature.parameters.values())}
    return {"name": name, "signature": str(signature), "doc": doc, "parameters": parameters,
            "returns": annotation_text(signature.return_annotation),
            "is_generator": inspect.isgeneratorfunction(fn), "input_schema": input_schema,
            "description": doc if doc else "%s%s" % (name, signature)}


