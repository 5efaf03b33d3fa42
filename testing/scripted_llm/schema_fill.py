"""JSON-schema filling: a minimal valid instance of any schema, the required fields an answer
lacks, and the schema graphiti writes into the prompt in json_object mode."""

from __future__ import annotations

import json
import math
from typing import Any

def _resolve_ref(schema: dict, root: dict) -> dict:
    ref = schema.get('$ref')
    if not isinstance(ref, str) or not ref.startswith('#/'):
        return schema
    node: Any = root
    for part in ref[2:].split('/'):
        if not isinstance(node, dict) or part not in node:
            return {}
        node = node[part]
    return node if isinstance(node, dict) else {}


def minimal_instance(schema: dict | None, root: dict | None = None, _depth: int = 0) -> Any:
    """A minimal value valid against a JSON schema (required fields only: [] / '' / 0 /
    false / null where allowed / nested minimal objects)."""
    if not isinstance(schema, dict) or _depth > 32:
        return None
    root = root if root is not None else schema
    if '$ref' in schema:
        return minimal_instance(_resolve_ref(schema, root), root, _depth + 1)
    if 'const' in schema:
        return schema['const']
    if isinstance(schema.get('enum'), list) and schema['enum']:
        return schema['enum'][0]
    for key in ('anyOf', 'oneOf'):
        opts = schema.get(key)
        if isinstance(opts, list) and opts:
            for o in opts:
                if isinstance(o, dict) and o.get('type') == 'null':
                    return None
            return minimal_instance(opts[0], root, _depth + 1)
    if isinstance(schema.get('allOf'), list) and schema['allOf']:
        merged: dict = {}
        for o in schema['allOf']:
            o = _resolve_ref(o, root) if isinstance(o, dict) else {}
            for k, v in o.items():
                if k == 'properties':
                    merged.setdefault('properties', {}).update(v)
                elif k == 'required':
                    merged.setdefault('required', []).extend(v)
                else:
                    merged.setdefault(k, v)
        return minimal_instance(merged, root, _depth + 1)
    typ = schema.get('type')
    if isinstance(typ, list):
        typ = None if 'null' in typ else (typ[0] if typ else None)
        if typ is None:
            return None
    if typ == 'object' or (typ is None and 'properties' in schema):
        props = schema.get('properties') or {}
        out = {}
        for k in schema.get('required') or []:
            out[k] = minimal_instance(props.get(k, {}), root, _depth + 1)
        return out
    if typ == 'array':
        n = int(schema.get('minItems') or 0)
        items = schema.get('items') if isinstance(schema.get('items'), dict) else {}
        return [minimal_instance(items, root, _depth + 1) for _ in range(n)]
    if typ == 'string':
        fmt = schema.get('format')
        fixed = {
            'date-time': '1970-01-01T00:00:00Z',
            'date': '1970-01-01',
            'time': '00:00:00',
            'uuid': '00000000-0000-0000-0000-000000000000',
            'email': 'nobody@example.com',
            'uri': 'http://127.0.0.1/',
            'duration': 'P0D',
        }.get(fmt)
        if fixed is not None:
            return fixed
        return 'x' * int(schema.get('minLength') or 0)
    if typ in ('integer', 'number'):
        lo = schema.get('minimum')
        xlo = schema.get('exclusiveMinimum')
        hi = schema.get('maximum')
        xhi = schema.get('exclusiveMaximum')
        val: float = 0
        if isinstance(lo, (int, float)) and val < lo:
            val = lo
        if isinstance(xlo, (int, float)) and val <= xlo:
            val = xlo + 1
        if isinstance(hi, (int, float)) and val > hi:
            val = hi
        if isinstance(xhi, (int, float)) and val >= xhi:
            val = xhi - 1
        return int(math.ceil(val)) if typ == 'integer' else float(val)
    if typ == 'boolean':
        return False
    return None


def fill_required(value: Any, schema: dict | None, root: dict | None = None, _depth: int = 0) -> Any:
    """Add any required field the brain's answer lacks (e.g. strict schemas on /responses
    make every property required)."""
    if not isinstance(schema, dict) or _depth > 32:
        return value
    root = root if root is not None else schema
    if '$ref' in schema:
        return fill_required(value, _resolve_ref(schema, root), root, _depth + 1)
    for key in ('anyOf', 'oneOf'):
        if isinstance(schema.get(key), list) and value is not None:
            for o in schema[key]:
                o2 = _resolve_ref(o, root) if isinstance(o, dict) else {}
                if isinstance(value, dict) and (o2.get('type') == 'object' or 'properties' in o2):
                    return fill_required(value, o2, root, _depth + 1)
                if isinstance(value, list) and o2.get('type') == 'array':
                    return fill_required(value, o2, root, _depth + 1)
            return value
    if isinstance(value, dict) and (schema.get('type') == 'object' or 'properties' in schema):
        props = schema.get('properties') or {}
        for k in schema.get('required') or []:
            if k not in value:
                value[k] = minimal_instance(props.get(k, {}), root, _depth + 1)
        for k, v in list(value.items()):
            if k in props:
                value[k] = fill_required(v, props[k], root, _depth + 1)
        return value
    if isinstance(value, list) and isinstance(schema.get('items'), dict):
        return [fill_required(v, schema['items'], root, _depth + 1) for v in value]
    return value


# --------------------------------------------------------------------------------------
# Embeddings
# --------------------------------------------------------------------------------------



def _schema_in_prompt(prompt: str) -> dict | None:
    """The JSON schema graphiti appends in json_object mode ("Respond with a JSON object
    in the following format: {...}")."""
    marker = 'Respond with a JSON object in the following format:'
    i = prompt.rfind(marker)
    if i < 0:
        return None
    rest = prompt[i + len(marker):]
    j = rest.find('{')
    if j < 0:
        return None
    try:
        val, _ = json.JSONDecoder().raw_decode(rest, j)
    except ValueError:
        return None
    return val if isinstance(val, dict) else None

