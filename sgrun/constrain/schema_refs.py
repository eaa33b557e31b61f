"""$ref resolution inside one schema document: JSON pointers, $id-based base URIs, $anchor.
Remote references (documents we were not given) are refused."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urldefrag
from urllib.parse import urljoin as _http_join

from sgrun.constrain.errors import InvalidSchemaError, UnsupportedSchemaError

_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SUBSCHEMA_SINGLE = ("items", "additionalProperties", "additionalItems", "not", "contains", "if", "then", "else",
                     "propertyNames", "unevaluatedItems", "unevaluatedProperties", "contentSchema")


class SchemaIndex:
    """Every addressable schema in a document: absolute URI (with fragment) -> (schema, pointer, base)."""

    def __init__(self, root: Any, base: str = "https://sgrun.invalid/root.json"):
        self.root = root
        self.by_uri: dict[str, tuple[Any, str, str]] = {}
        self.base_of: dict[int, str] = {}
        self._walk(root, "#", base, is_root=True)

    def _walk(self, node: Any, ptr: str, base: str, is_root: bool = False) -> None:
        if not isinstance(node, dict):
            if isinstance(node, list):
                return
            return
        sid = node.get("$id") if isinstance(node.get("$id"), str) else None
        if sid is None and isinstance(node.get("id"), str) and not isinstance(node.get("id"), dict) \
                and "$ref" not in node and ptr.split("/")[-2:-1] != ["properties"]:
            sid = node["id"]  # draft-04 spelling
        if sid is not None and not sid.startswith("#"):
            base = urljoin(base, sid)
            self.by_uri[urldefrag(base)[0]] = (node, ptr, base)
        elif sid is not None and sid.startswith("#"):
            self.by_uri[urljoin(base, sid)] = (node, ptr, base)
        if is_root:
            self.by_uri[urldefrag(base)[0]] = (node, ptr, base)
        anchor = node.get("$anchor")
        if isinstance(anchor, str):
            self.by_uri[urldefrag(base)[0] + "#" + anchor] = (node, ptr, base)
        self.base_of[id(node)] = base
        for key, value in node.items():
            if key in _SUBSCHEMA_MAPS and isinstance(value, dict):
                for k, v in value.items():
                    self._walk(v, f"{ptr}/{key}/{_escape(k)}", base)
            elif key in _SUBSCHEMA_LISTS and isinstance(value, list):
                for i, v in enumerate(value):
                    self._walk(v, f"{ptr}/{key}/{i}", base)
            elif key == "items" and isinstance(value, list):
                for i, v in enumerate(value):
                    self._walk(v, f"{ptr}/{key}/{i}", base)
            elif key in _SUBSCHEMA_SINGLE:
                self._walk(value, f"{ptr}/{key}", base)

    def base_for(self, node: Any, fallback: str) -> str:
        return self.base_of.get(id(node), fallback)

    def resolve(self, ref: str, base: str, ptr: str) -> tuple[Any, str, str]:
        """-> (target schema, its pointer, its base URI)."""
        absolute = urljoin(base, ref)
        doc_uri, fragment = urldefrag(absolute)
        if absolute in self.by_uri:
            return self.by_uri[absolute]
        if doc_uri not in self.by_uri:
            raise UnsupportedSchemaError("$ref", ptr, f"remote reference {ref!r} cannot be fetched; inline it")
        doc, doc_ptr, doc_base = self.by_uri[doc_uri]
        if not fragment:
            return doc, doc_ptr, doc_base
        if not fragment.startswith("/"):
            raise InvalidSchemaError(f"$ref {ref!r} at {ptr}: unknown anchor {fragment!r}")
        node, cur_ptr, cur_base = doc, doc_ptr, doc_base
        for raw in fragment.split("/")[1:]:
            part = unquote(raw).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise InvalidSchemaError(f"$ref {ref!r} at {ptr} points at nothing")
            cur_ptr = f"{cur_ptr}/{_escape(part)}"
            cur_base = self.base_of.get(id(node), cur_base)
        return node, cur_ptr, cur_base


def urljoin(base: str, ref: str) -> str:
    """RFC 3986 reference resolution, plus URN bases (urljoin ignores non-hierarchical schemes)."""
    if ":" in ref.split("/", 1)[0] and not ref.startswith("#"):
        return ref  # already absolute (http:, urn:, tag: ...)
    if ref.startswith("#"):
        return urldefrag(base)[0] + ref
    if base.startswith("urn:"):
        return ref
    return _http_join(base, ref)


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
