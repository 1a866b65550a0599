"""Schema compatibility as Pulsar 4.0's schema registry decides it: pure functions, no I/O.

Owns: parsing Avro schema definitions (AVRO, and JSON, whose Pulsar definitions are Avro-shaped),
Avro's schema resolution rules (can a reader schema read what a writer schema wrote), the
compatibility strategies with Pulsar's names, and which check each schema type gets
(`SchemaRegistryServiceImpl.checkCompatible`, `AvroSchemaBasedCompatibilityCheck`,
`JsonSchemaCompatibilityCheck`, `KeyValueSchemaCompatibilityCheck`, `SchemaCompatibilityCheck.DEFAULT`).
Must not touch: storage, the wire, the clock. The registry (broker/schemas.py) hands it schemas.

The resolution rules are those of the validator Pulsar's `AvroSchemaBasedCompatibilityCheck` builds
(Avro 1.11's `SchemaValidatorBuilder`, whose strategies ask `ResolvingGrammarGenerator` for a grammar
without errors), not Avro's stricter `SchemaCompatibility`: same primitive types match, int/long/float
promote to wider numbers, string and bytes to each other; a record reads any other record, whatever its
name, when every reader field is in the writer (by name or alias) with a readable type, or has a
default; an enum reads an enum of the same unqualified name (or an alias of it), whatever its symbols;
a fixed needs the same name and size; a union writer needs every branch readable; a union reader needs
one branch that reads the writer. Recursive schemas are compared once per (reader, writer) pair, as
Avro's memo does.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AVRO_SHAPED_TYPES",
    "STRATEGIES",
    "TRANSITIVE_STRATEGIES",
    "AvroParseError",
    "IncompatibleSchemaError",
    "SchemaData",
    "can_read",
    "check_compatible",
    "check_with_strategy",
    "decode_key_value",
    "encode_key_value",
    "legacy_json_schema",
    "parse_avro",
    "same_definition",
]

# Pulsar's SchemaCompatibilityStrategy; UNDEFINED only as a namespace policy ("use the broker's").
STRATEGIES = (
    "UNDEFINED",
    "ALWAYS_INCOMPATIBLE",
    "ALWAYS_COMPATIBLE",
    "BACKWARD",
    "FORWARD",
    "FULL",
    "BACKWARD_TRANSITIVE",
    "FORWARD_TRANSITIVE",
    "FULL_TRANSITIVE",
)
TRANSITIVE_STRATEGIES = frozenset({"BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE"})
# The types whose definitions are Avro schemas (Pulsar's isUsingAvroSchemaParser).
AVRO_SHAPED_TYPES = frozenset({"AVRO", "JSON", "PROTOBUF"})

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
# Writer type -> reader types that read it besides itself (Avro's promotions).
_PROMOTIONS = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}
# Attributes that are structure, not properties, when Avro compares schemas for equality.
_RESERVED = frozenset(
    {"type", "name", "namespace", "fields", "items", "values", "symbols", "size", "doc", "aliases", "default", "order"}
)


class IncompatibleSchemaError(Exception):
    """Pulsar's IncompatibleSchemaException; the client gets ServerError IncompatibleSchema."""

    server_error = "IncompatibleSchema"


class AvroParseError(ValueError):
    """A definition that is not an Avro schema (Avro's SchemaParseException)."""


@dataclass(frozen=True)
class SchemaData:
    """One schema as the registry keeps it: Pulsar's SchemaType name, its definition, its properties."""

    type: str
    data: bytes
    properties: Mapping[str, str] = field(default_factory=dict)


# ------------------------------------------------------------------------------------ Avro schemas


@dataclass(eq=False)
class _Named:
    kind: str  # record, enum, fixed
    fullname: str
    name: str
    aliases: frozenset[str]
    props: tuple[tuple[str, str], ...]
    fields: list[_Field] = field(default_factory=list)
    symbols: tuple[str, ...] = ()
    enum_default: str | None = None
    size: int = 0
    definition: Any = None


@dataclass(eq=False)
class _Field:
    name: str
    type: Any
    aliases: frozenset[str]
    has_default: bool
    default: Any
    order: str


@dataclass(frozen=True)
class _Primitive:
    type: str
    props: tuple[tuple[str, str], ...] = ()


@dataclass(eq=False)
class _Array:
    items: Any
    props: tuple[tuple[str, str], ...] = ()


@dataclass(eq=False)
class _Map:
    values: Any
    props: tuple[tuple[str, str], ...] = ()


@dataclass(eq=False)
class _Union:
    branches: list[Any]


@dataclass(eq=False)
class AvroSchema:
    """A parsed Avro schema: its root and the JSON it came from (for messages)."""

    root: Any
    definition: Any


def parse_avro(text: str | bytes) -> AvroSchema:
    """Parse an Avro schema definition; names are not validated and defaults not checked, as Pulsar's
    parser (COMPATIBLE_NAME_VALIDATOR, setValidateDefaults(false)). Raises AvroParseError."""
    try:
        definition = json.loads(text)
    except (ValueError, UnicodeDecodeError) as error:
        raise AvroParseError(f"Cannot parse schema JSON: {error}") from error
    return AvroSchema(_Parser().parse(definition, None), definition)


def _props(node: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in node.items() if k not in _RESERVED))


class _Parser:
    def __init__(self) -> None:
        self.names: dict[str, _Named] = {}

    def parse(self, node: Any, namespace: str | None) -> Any:
        if isinstance(node, str):
            return self._reference(node, namespace)
        if isinstance(node, list):
            return _Union([self.parse(branch, namespace) for branch in node])
        if not isinstance(node, dict):
            raise AvroParseError(f"No type: {json.dumps(node)}")
        kind = node.get("type")
        if isinstance(kind, (dict, list)):
            # {"type": {...}} wraps a schema; Avro reads the inner one.
            return self.parse(kind, namespace)
        if not isinstance(kind, str):
            raise AvroParseError(f"No type: {json.dumps(node)}")
        if kind in _PRIMITIVES:
            return _Primitive(kind, _props(node))
        if kind in ("record", "error", "enum", "fixed"):
            return self._named(node, "record" if kind == "error" else kind, namespace)
        if kind in ("array", "map"):
            return self._container(node, kind, namespace)
        return self._reference(kind, namespace)

    def _container(self, node: dict[str, Any], kind: str, namespace: str | None) -> _Array | _Map:
        """An array of its `items`, or a map of its `values`."""
        key = "items" if kind == "array" else "values"
        if key not in node:
            what = "Array has no items type" if kind == "array" else "Map has no values type"
            raise AvroParseError(f"{what}: {json.dumps(node)}")
        inner = self.parse(node[key], namespace)
        return _Array(inner, _props(node)) if kind == "array" else _Map(inner, _props(node))

    def _reference(self, name: str, namespace: str | None) -> Any:
        if name in _PRIMITIVES:
            return _Primitive(name)
        for candidate in (name, f"{namespace}.{name}" if namespace and "." not in name else None):
            if candidate is not None and candidate in self.names:
                return self.names[candidate]
        raise AvroParseError(
            f'"{name}" is not a defined name. The type of the "{name}" field must be a defined name or a {{"type": ...}} expression.'
        )

    @staticmethod
    def _fullname(name: str, namespace: str | None) -> tuple[str, str | None]:
        if "." in name:
            return name, name.rsplit(".", 1)[0]
        return (f"{namespace}.{name}" if namespace else name), namespace

    def _named(self, node: dict[str, Any], kind: str, namespace: str | None) -> _Named:
        name = node.get("name")
        if not isinstance(name, str) or not name:
            raise AvroParseError(f"No name in schema: {json.dumps(node)}")
        own_namespace = node.get("namespace", namespace)
        if own_namespace is not None and not isinstance(own_namespace, str):
            raise AvroParseError(f"Namespace is not a string: {json.dumps(node)}")
        fullname, space = self._fullname(name, own_namespace or None)
        if fullname in self.names:
            raise AvroParseError(f"Can't redefine: {fullname}")
        aliases = frozenset(self._fullname(a, space)[0] for a in node.get("aliases", []) if isinstance(a, str))
        named = _Named(kind, fullname, fullname.rsplit(".", 1)[-1], aliases, _props(node), definition=node)
        self.names[fullname] = named  # before the fields: a record may refer to itself
        if kind == "record":
            named.fields.extend(self._fields(node, fullname, space))
        elif kind == "enum":
            named.symbols, named.enum_default = _enum_symbols(node, fullname)
        else:
            size = node.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise AvroParseError(f"Invalid or no size: {json.dumps(node)}")
            named.size = size
        return named

    def _fields(self, node: dict[str, Any], fullname: str, space: str | None) -> list[_Field]:
        """A record's fields, each name once, their types parsed in the record's namespace."""
        fields = node.get("fields")
        if not isinstance(fields, list):
            raise AvroParseError(f"Record has no fields: {json.dumps(node)}")
        parsed: list[_Field] = []
        seen: set[str] = set()
        for item in fields:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str) or "type" not in item:
                raise AvroParseError(f"Bad field: {json.dumps(item)}")
            if item["name"] in seen:
                raise AvroParseError(f"Duplicate field {item['name']} in record {fullname}")
            seen.add(item["name"])
            parsed.append(
                _Field(
                    item["name"],
                    self.parse(item["type"], space),
                    frozenset(a for a in item.get("aliases", []) if isinstance(a, str)),
                    "default" in item,
                    item.get("default"),
                    str(item.get("order", "ascending")),
                )
            )
        return parsed


def _enum_symbols(node: dict[str, Any], fullname: str) -> tuple[tuple[str, ...], str | None]:
    """An enum's symbols, each once, and its default symbol if it names one."""
    symbols = node.get("symbols")
    if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols):
        raise AvroParseError(f"Enum has no symbols: {json.dumps(node)}")
    if len(set(symbols)) != len(symbols):
        raise AvroParseError(f"Duplicate enum symbol in {fullname}")
    default = node.get("default")
    return tuple(symbols), default if isinstance(default, str) else None


# ------------------------------------------------------------------------------- Avro resolution


def can_read(reader: AvroSchema, writer: AvroSchema) -> bool:
    """Whether data written with `writer` can be read with `reader` (Avro's schema resolution)."""
    return _Resolver().readable(reader.root, writer.root)


class _Resolver:
    def __init__(self) -> None:
        # (reader, writer) pairs under comparison or compared: a recursive pair is taken as readable
        # while its comparison is in progress, as Avro's ReaderWriterCompatibilityChecker does.
        self._memo: dict[tuple[int, int], bool] = {}

    def readable(self, reader: Any, writer: Any) -> bool:
        key = (id(reader), id(writer))
        known = self._memo.get(key)
        if known is not None:
            return known
        self._memo[key] = True
        result = self._compare(reader, writer)
        self._memo[key] = result
        return result

    def _compare(self, reader: Any, writer: Any) -> bool:
        if isinstance(writer, _Union) and not isinstance(reader, _Union):
            return all(self.readable(reader, branch) for branch in writer.branches)
        if isinstance(reader, _Union):
            if isinstance(writer, _Union):
                return all(self.readable(reader, branch) for branch in writer.branches)
            return any(self.readable(branch, writer) for branch in reader.branches)
        if isinstance(reader, _Primitive):
            return isinstance(writer, _Primitive) and (
                reader.type == writer.type or reader.type in _PROMOTIONS.get(writer.type, ())
            )
        if isinstance(reader, _Array):
            return isinstance(writer, _Array) and self.readable(reader.items, writer.items)
        if isinstance(reader, _Map):
            return isinstance(writer, _Map) and self.readable(reader.values, writer.values)
        if not isinstance(writer, _Named) or writer.kind != reader.kind:
            return False
        return self._named_readable(reader, writer)

    def _named_readable(self, reader: _Named, writer: _Named) -> bool:
        # A record's name does not count: the validator resolves records field by field. An enum or a
        # fixed needs the same unqualified name, or the writer's full name among the reader's aliases.
        if reader.kind != "record" and reader.name != writer.name and writer.fullname not in reader.aliases:
            return False
        if reader.kind == "fixed":
            return reader.size == writer.size
        if reader.kind == "enum":
            # A writer symbol the reader lacks becomes an adjustment in the grammar, which the validator
            # does not count as an error: only decoding such a value fails.
            return True
        writer_fields = {f.name: f for f in writer.fields}
        for reader_field in reader.fields:
            written = writer_fields.get(reader_field.name)
            if written is None:
                written = next((writer_fields[a] for a in sorted(reader_field.aliases) if a in writer_fields), None)
            if written is None:
                if not reader_field.has_default:
                    return False
            elif not self.readable(reader_field.type, written.type):
                return False
        return True


def _canonical(node: Any, defined: set[int]) -> Any:
    """A comparable form of a schema: Avro's Schema.equals (names, fields, defaults, order, symbols,
    sizes and properties; docs and aliases do not count)."""
    if isinstance(node, _Primitive):
        return ("primitive", node.type, node.props)
    if isinstance(node, _Array):
        return ("array", _canonical(node.items, defined), node.props)
    if isinstance(node, _Map):
        return ("map", _canonical(node.values, defined), node.props)
    if isinstance(node, _Union):
        return ("union", tuple(_canonical(b, defined) for b in node.branches))
    if id(node) in defined:
        return ("ref", node.fullname)
    defined.add(id(node))
    fields = tuple(
        (f.name, _canonical(f.type, defined), f.has_default, json.dumps(f.default, sort_keys=True), f.order)
        for f in node.fields
    )
    return (node.kind, node.fullname, node.props, fields, node.symbols, node.size)


def same_definition(first: SchemaData, second: SchemaData) -> bool:
    """Whether two schemas are the same version (Pulsar's getSchemaVersionBySchemaData): for
    Avro-shaped types equal parsed schemas, else equal bytes; the types must match either way."""
    if first.type != second.type:
        return False
    if first.data == second.data:
        return True
    if first.type in AVRO_SHAPED_TYPES:
        try:
            return _canonical(parse_avro(first.data).root, set()) == _canonical(parse_avro(second.data).root, set())
        except AvroParseError:
            return False
    return False


# ----------------------------------------------------------------------------------- strategies


def _pretty(schema: AvroSchema) -> str:
    # Avro's Schema.toString(true): Jackson's pretty printer.
    return json.dumps(schema.definition, indent=2, separators=(",", " : "))


def _unreadable(strategy: str, reader: AvroSchema, writer: AvroSchema) -> IncompatibleSchemaError:
    return IncompatibleSchemaError(
        f"Error during schema compatibility check with strategy {strategy}: "
        f"org.apache.avro.SchemaValidationException: Unable to read schema: \n{_pretty(writer)}\n"
        f"using schema:\n{_pretty(reader)}"
    )


def _validate_avro(existing: Sequence[AvroSchema], new: AvroSchema, strategy: str) -> None:
    """Avro's SchemaValidatorBuilder as Pulsar builds it: `existing` is newest first; the plain
    strategies look at the newest only, the transitive ones at all."""
    if strategy == "ALWAYS_COMPATIBLE" or not existing:
        return
    if strategy not in ("BACKWARD", "FORWARD", "FULL") and strategy not in TRANSITIVE_STRATEGIES:
        raise _unreadable(strategy, new, existing[0])  # NeverSchemaValidator
    checked = existing if strategy in TRANSITIVE_STRATEGIES else existing[:1]
    base = strategy.removesuffix("_TRANSITIVE")
    for old in checked:
        if base in ("BACKWARD", "FULL") and not can_read(new, old):
            raise _unreadable(strategy, new, old)
        if base in ("FORWARD", "FULL") and not can_read(old, new):
            raise _unreadable(strategy, old, new)


def _parse_for_check(data: bytes) -> AvroSchema:
    try:
        return parse_avro(data)
    except AvroParseError as error:
        raise IncompatibleSchemaError(f"org.apache.avro.SchemaParseException: {error}") from error


def _check_avro(existing: Sequence[SchemaData], new: SchemaData, strategy: str) -> None:
    parsed = [_parse_for_check(old.data) for old in reversed(existing)]
    _validate_avro(parsed, _parse_for_check(new.data), strategy)


def _is_avro(data: bytes) -> bool:
    try:
        parse_avro(data)
    except AvroParseError:
        return False
    return True


def legacy_json_schema(data: bytes) -> dict[str, Any] | None:
    """The JSON-schema definitions of Pulsar before 2.1 (Jackson's JsonSchema, `"type": "object"`)."""
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) and value.get("type") == "object" else None


def _check_json(existing: Sequence[SchemaData], new: SchemaData, strategy: str) -> None:
    """JsonSchemaCompatibilityCheck: Avro-shaped definitions by Avro's rules; a legacy JSON-schema
    definition is replaced by an Avro-shaped one freely and matches another legacy one by id."""
    if all(_is_avro(old.data) for old in existing) and _is_avro(new.data):
        _check_avro(existing, new, strategy)
        return
    for old in existing:
        if _is_avro(old.data):
            if legacy_json_schema(new.data) is None:
                raise IncompatibleSchemaError("Unknown schema format")
            continue
        legacy = legacy_json_schema(old.data)
        if legacy is None:
            raise IncompatibleSchemaError("Unknown schema format")
        if _is_avro(new.data):
            continue
        new_legacy = legacy_json_schema(new.data)
        if new_legacy is None:
            raise IncompatibleSchemaError("Unknown schema format")
        if legacy.get("id") != new_legacy.get("id"):
            raise IncompatibleSchemaError(
                f"Incompatible Schema from {old.data.decode(errors='replace')} + to {new.data.decode(errors='replace')}"
            )


def decode_key_value(schema: SchemaData) -> tuple[SchemaData, SchemaData]:
    """A KEY_VALUE schema's key and value schemas (Pulsar's KeyValueSchemaInfo): the data is the key
    definition then the value definition, each after its 4-byte big-endian length; their types and
    properties are in `key.schema.*` and `value.schema.*`, the types BYTES when absent."""
    data = schema.data
    try:
        (key_length,) = struct.unpack_from(">i", data, 0)
        key = data[4 : 4 + key_length]
        (value_length,) = struct.unpack_from(">i", data, 4 + key_length)
        value = data[8 + key_length : 8 + key_length + value_length]
    except struct.error as error:
        raise IncompatibleSchemaError(f"Invalid KEY_VALUE schema data: {error}") from error
    if key_length < 0 or value_length < 0 or len(key) != key_length or len(value) != value_length:
        raise IncompatibleSchemaError("Invalid KEY_VALUE schema data: lengths do not match the data")
    parts = []
    for prefix, part in (("key", key), ("value", value)):
        raw = schema.properties.get(f"{prefix}.schema.properties")
        try:
            properties = json.loads(raw) if raw else {}
        except ValueError as error:
            raise IncompatibleSchemaError(f"Invalid {prefix}.schema.properties: {error}") from error
        parts.append(SchemaData(schema.properties.get(f"{prefix}.schema.type", "BYTES"), part, properties or {}))
    return parts[0], parts[1]


def encode_key_value(key: bytes, value: bytes) -> bytes:
    """The data of a KEY_VALUE schema from its key and value definitions."""
    return struct.pack(">i", len(key)) + key + struct.pack(">i", len(value)) + value


def _check_key_value(existing: Sequence[SchemaData], new: SchemaData, strategy: str) -> None:
    if strategy == "ALWAYS_COMPATIBLE":
        return
    new_key, new_value = decode_key_value(new)
    keys, values = [], []
    for old in existing:
        if old.type != "KEY_VALUE":
            raise IncompatibleSchemaError("From schema is not a KEY_VALUE schema.")
        old_key, old_value = decode_key_value(old)
        if old_key.type != new_key.type or old_value.type != new_value.type:
            raise IncompatibleSchemaError(
                "Key schemas or Value schemas are different schema type, "
                f"from key schema type is {old_key.type} and to key schema is {new_key.type}, "
                f"from value schema is {old_value.type} and to value schema is {new_value.type}"
            )
        keys.append(old_key)
        values.append(old_value)
    _type_check(new_key.type)(keys, new_key, strategy)
    _type_check(new_value.type)(values, new_value, strategy)


def _check_default(_existing: Sequence[SchemaData], _new: SchemaData, strategy: str) -> None:
    """SchemaCompatibilityCheck.DEFAULT: primitive and other types without a checker of their own."""
    if strategy == "ALWAYS_INCOMPATIBLE":
        raise IncompatibleSchemaError("Schema compatibility strategy is ALWAYS_INCOMPATIBLE")


def _type_check(schema_type: str):
    return {"AVRO": _check_avro, "JSON": _check_json, "KEY_VALUE": _check_key_value}.get(schema_type, _check_default)


def check_with_strategy(existing: Sequence[SchemaData], new: SchemaData, strategy: str) -> None:
    """The type's checker against `existing` (oldest first), every one of the new schema's type."""
    _type_check(new.type)(existing, new, strategy)


def check_compatible(existing: Sequence[SchemaData], new: SchemaData, strategy: str) -> None:
    """Whether `new` may follow `existing` (the versions since the last deletion, oldest first) under
    `strategy`, as SchemaRegistryServiceImpl.checkCompatible decides: a transitive strategy checks
    every version, the others the newest; a different type is never compatible; an identical newest
    definition always is. Raises IncompatibleSchemaError."""
    if strategy == "ALWAYS_COMPATIBLE" or not existing:
        return
    checked = list(existing) if strategy in TRANSITIVE_STRATEGIES else [existing[-1]]
    for old in checked:
        if old.type != new.type:
            raise IncompatibleSchemaError(
                f"Incompatible schema: exists schema type {old.type}, new schema type {new.type}"
            )
    if strategy not in TRANSITIVE_STRATEGIES and checked[0].data == new.data:
        return
    check_with_strategy(checked, new, strategy)
