"""Internal: a job spec read from YAML with --set overrides (load_spec), and written back (dump_spec)."""

from __future__ import annotations

from collections.abc import Mapping
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


Overrides = list[str] | Mapping[str, Any]


def apply_overrides(raw: dict[str, Any], overrides: Overrides) -> dict[str, Any]:
    """``--set`` overrides (``a.b=c``, the value parsed as YAML), or a mapping of dotted keys to values."""
    items = ([(f"{key}={value}", key.split("."), value) for key, value in overrides.items()] if isinstance(overrides, Mapping)
             else [(text, *parse_override(text)) for text in overrides])
    for text, keys, value in items:
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


def load_spec(path: str | Path | None, overrides: Overrides | None = None) -> JobSpec:
    """Read a YAML job spec (or start from defaults when path is None) and apply overrides; every field is checked.

    Args:
        path: The job spec YAML, e.g. ``jobs/stsb_indomain_bm25.yaml``; None: every field's default.
        overrides: ``--set`` strings (``"data.train_limit=1000"``, the value parsed as YAML), or a mapping of dotted
            keys to values (``{"data.train_limit": 1000}``).

    Returns:
        The validated ``JobSpec``. A SpecError names the file and each bad field.

    Example:
        >>> spec = load_spec("jobs/stsb_indomain_bm25.yaml", {"data.train_limit": 1000, "sampling.top_k": 5})
        >>> spec.data.train_limit, spec.sampling.top_k
        (1000, 5)
        >>> load_spec(None, ["sampling.top_k=0"])
        Traceback (most recent call last):
        ...
        augsbert_ray.config.errors.SpecError: invalid job spec (defaults):
          sampling.top_k: Input should be greater than 0 (got 0)
    """
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
