"""Internal: a job spec read from YAML with --set overrides (load_spec), and written back (dump_spec)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from augsbert_ray.config.errors import SpecError
from augsbert_ray.config.job import JobSpec


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b=c`` -> (['a', 'b'], c), with c parsed as YAML so that numbers and lists keep their type."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise SpecError(f"--set expects KEY=VALUE (e.g. data.train_limit=1000), got {text!r}")
    try:
        return key.strip().split("."), yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise SpecError(f"--set {text}: the value is not valid YAML ({yaml_problem(exc)})") from None


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error in one line: what is wrong, and where."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{problem}, line {mark.line + 1} column {mark.column + 1}" if mark else problem


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for text in overrides:
        keys, value = parse_override(text)
        node = raw
        for depth, key in enumerate(keys[:-1]):
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                raise SpecError(f"--set {text}: {'.'.join(keys[: depth + 1])} is not a section")
            node = child
        node[keys[-1]] = value
    return raw


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (a second `data:` section would silently
    replace the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise yaml.constructor.ConstructorError(None, None, f"a key must be a name, not a {type(key).__name__}", key_node.start_mark)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} appears twice in one mapping", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def format_validation_error(error: ValidationError, origin: str) -> str:
    lines = [f"invalid job spec {origin}:"]
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        # a section's whole mapping (a check across its fields, or the spec's) says nothing the message does not
        shown = item["type"] != "missing" and not isinstance(item.get("input"), (dict, BaseModel))
        lines.append(f"  {field}: {message} (got {item.get('input')!r:.200})" if shown else f"  {field}: {message}")
    return "\n".join(lines)


def load_spec(path: str | Path | None, overrides: list[str] | None = None) -> JobSpec:
    """Read a YAML job spec (or start from defaults when path is None) and apply ``--set`` overrides."""
    raw: dict[str, Any] = {}
    origin = "(defaults)"
    if path is not None:
        origin = str(path)
        try:
            data = Path(path).read_bytes()
            loaded = yaml.load(data.decode("utf-8"), Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
        except FileNotFoundError:
            raise SpecError(f"job spec not found: {path}") from None
        except IsADirectoryError:
            raise SpecError(f"job spec {path}: a directory, not a YAML file") from None
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            raise SpecError(f"job spec {path}:{line}: not UTF-8 ({exc.reason}); save it as UTF-8") from None
        except yaml.YAMLError as exc:
            raise SpecError(f"job spec {path} is not valid YAML: {yaml_problem(exc)}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise SpecError(f"job spec {path} must be a mapping of sections, got {type(loaded).__name__}")
        raw = loaded or {}
    raw = apply_overrides(raw, overrides or [])
    try:
        return JobSpec.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(format_validation_error(exc, origin)) from None


def dump_spec(spec: JobSpec) -> str:
    return yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)
