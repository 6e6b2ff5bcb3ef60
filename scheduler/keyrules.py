"""Key rules: a job's limit key derived when it is added, for both stores
(docs/flow-control.md, "A job's limit key").

A rule is declared in the namespace for a task (``task:<name>``) or a lane
(``lane:<name>``): a *template*, literal text with ``{name}`` fields, each the job's
keyword argument of that name (a str or an int). A job added without a ``limit_key`` gets
one from its task's rule, else from its lane's rule, else it has none; a job that gives
its own ``limit_key`` keeps it. So a limit per task is a rule with a literal template
(``task:send_email``) and a limit on that key; per customer, ``customer:{customer_id}``.

The key is decided once, when the job is added, and stored with its definition: a rule
changed later applies to jobs added after it (re-adding a job under a changed rule is a
changed definition: the job is replaced).
"""

from __future__ import annotations

import dataclasses
import json
import string
from collections.abc import Mapping
from typing import Any

from scheduler import tasks, validation
from scheduler.errors import KeyRuleError
from scheduler.model import JobSpec, TaskRef

TASK, LANE = "task:", "lane:"  # a rule's name: "task:<task name>" or "lane:<lane name>"
TEMPLATE_MAX = 200  # characters: a limit key's own bound

#: A parsed template: its literal parts (braces unescaped) and the kwarg after each (None:
#: the text ends there).
Parsed = tuple[tuple[str, "str | None"], ...]

_FORMATTER = string.Formatter()


def target(task: object = None, lane: object = None) -> str:
    """A rule's name: ``task:<task>`` or ``lane:<lane>``; exactly one of them is given."""
    if (task is None) == (lane is None):
        raise TypeError("a key rule is for one task (task=...) or one lane (lane=...): give one")
    if task is not None:
        return TASK + validation.name(task, "task name")
    return LANE + validation.name(lane, "lane name")


def parse(text: str) -> Parsed:
    """``text`` as a template, or a ValueError that says what to fix: ``{name}`` fields
    naming keyword arguments (identifiers), ``{{`` and ``}}`` for literal braces, no format
    specs, conversions, indexing or attribute access, printable literal text, at most
    ``TEMPLATE_MAX`` characters, and a result that can be a limit key."""
    if not isinstance(text, str):
        raise TypeError(f"a key template must be a str, got {type(text).__name__}")
    if not 1 <= len(text) <= TEMPLATE_MAX:
        raise ValueError(
            f"key template {text!r}: give 1 to {TEMPLATE_MAX} characters, such as "
            "'customer:{customer_id}'"
        )
    try:
        parts = list(_FORMATTER.parse(text))
    except ValueError as exc:
        raise ValueError(
            f"key template {text!r}: {exc}; write a literal brace as '{{{{' or '}}}}'"
        ) from None
    out: list[tuple[str, str | None]] = []
    for literal, field, spec, conversion in parts:
        if literal and not literal.isprintable():
            raise ValueError(f"key template {text!r}: its text must be printable")
        if field is not None and (spec or conversion is not None or not field.isidentifier()):
            raise ValueError(
                f"key template {text!r}: each field is a keyword argument's name in braces, "
                f"such as {{customer_id}}, with no format spec, conversion, index or "
                f"attribute (got {{{field}{'!' + conversion if conversion else ''}"
                f"{':' + spec if spec else ''}}})"
            )
        out.append((literal, field))
    fields = [f for _, f in out if f is not None]
    if not fields:  # a literal key: checked now
        try:
            validation.limit_key("".join(lit for lit, _ in out))
        except ValueError as exc:
            raise ValueError(f"key template {text!r}: {exc}") from None
    elif out[-1][1] is None and out[-1][0].endswith("*"):
        raise ValueError(
            f"key template {text!r} ends in '*', which names a pattern of keys in a limit"
        )
    return tuple(out)


def declared(template: object, task: object = None, lane: object = None) -> tuple[str, str | None]:
    """A ``set_key_rule`` call's arguments, checked: the rule's name and its template
    (None: the rule is removed)."""
    name = target(task, lane)
    if template is None:
        return name, None
    parse(template)  # type: ignore[arg-type]
    return name, template  # type: ignore[return-value]


def valid_name(name: str) -> bool:
    """Is ``name`` a rule's name (``task:<...>`` or ``lane:<...>``)?"""
    return (name.startswith(TASK) or name.startswith(LANE)) and len(name) > len(TASK)


class KeyRules:
    """A namespace's key rules at one moment (immutable): what ``keyed`` applies to the
    jobs added. ``rules``: rule name -> template, those that parse (a stored rule that
    does not, written by hand, is left out, as a limit that does not parse is)."""

    __slots__ = ("_parsed", "rules")

    def __init__(self, rules: Mapping[str, str]) -> None:
        self._parsed: dict[str, Parsed] = {}
        for name, text in rules.items():
            try:
                if valid_name(name):
                    self._parsed[name] = parse(text)
            except (ValueError, TypeError):
                continue
        self.rules: dict[str, str] = {n: rules[n] for n in sorted(self._parsed)}

    def __bool__(self) -> bool:
        return bool(self._parsed)

    def changed(self, name: str, template: str | None) -> KeyRules | None:
        """These rules with ``name``'s set to ``template`` (None: removed); None if that
        is what they already are."""
        if self.rules.get(name) == template:
            return None
        rules = dict(self.rules)
        if template is None:
            del rules[name]
        else:
            rules[name] = template
        return KeyRules(rules)

    def keyed(self, spec: JobSpec) -> JobSpec:
        """``spec`` with the limit key its rule gives it, or ``spec`` itself (it has its
        own key, or no rule applies). Raises ``KeyRuleError`` (nothing is written) when
        the rule needs a keyword argument the job lacks or has of the wrong type, or makes
        a text that is not a limit key."""
        if spec.limit_key is not None or not self._parsed:
            return spec
        task, args_json = _task_of(spec)
        name = TASK + task if task is not None and TASK + task in self._parsed else None
        if name is None:
            name = LANE + spec.lane
            if name not in self._parsed:
                return spec
        key = self._render(spec, name, task, args_json)
        return dataclasses.replace(spec, limit_key=key)

    def _render(self, spec: JobSpec, name: str, task: str | None, args_json: str) -> str:
        parsed = self._parsed[name]
        kwargs: dict[str, Any] | None = None
        out = []
        for literal, field in parsed:
            out.append(literal)
            if field is None:
                continue
            if kwargs is None:
                loaded = json.loads(args_json)
                kwargs = loaded if isinstance(loaded, dict) else {}
            if field not in kwargs:
                raise KeyRuleError(
                    f"{_whose(spec, task, name, self.rules[name])} needs its keyword argument "
                    f"{field!r} (a str or an int), and the job has none: pass "
                    f"kwargs={{{field!r}: ...}}, give the job its own limit_key=, or change "
                    "the rule (set_key_rule, duetime limit rule set)"
                )
            value = kwargs[field]
            if isinstance(value, bool) or not isinstance(value, str | int):
                raise KeyRuleError(
                    f"{_whose(spec, task, name, self.rules[name])} needs its keyword argument "
                    f"{field!r} to be a str or an int, and it is "
                    f"{validation.shown_value(value, 40)} ({type(value).__name__}): pass a "
                    "str or an int, or give the job its own limit_key="
                )
            out.append(str(value))
        try:
            return validation.limit_key("".join(out))
        except ValueError as exc:
            used = ", ".join(repr(f) for _, f in parsed if f is not None)
            raise KeyRuleError(
                f"{_whose(spec, task, name, self.rules[name])} makes no limit key of the "
                f"job's keyword arguments {used}: {exc}; pass other values, or give the job "
                "its own limit_key="
            ) from None


EMPTY = KeyRules({})


def _task_of(spec: JobSpec) -> tuple[str | None, str]:
    """The job's task name (None: a callable that is not a registered task) and its
    arguments as JSON."""
    t = spec.target
    if isinstance(t, TaskRef):
        return t.name, t.args_json
    return tasks.name_of(t), "{}"


def _whose(spec: JobSpec, task: str | None, name: str, template: str) -> str:
    what = f"task {task!r}" if task is not None else "a callable"
    return f"job {spec.job_id!r} ({what}, lane {spec.lane!r}): the key rule {name!r}, {template!r},"
