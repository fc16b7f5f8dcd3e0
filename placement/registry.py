"""Find a placement provider by name: built-ins, then entry points, then YAML policy files.

Third-party providers register in the entry point group ``carbonspan.placement_policies``
(``name = "package.module:object"``); the object is a provider instance, a class (called with
no arguments) or a factory. YAML formula policies are found as ``NAME.yaml`` in
``CARBONSPAN_PLACEMENT_POLICY_DIR`` (default ``~/.config/carbonspan/placement-policies``) or
given as a path. Nothing here decides whether a policy may use carbon: that is the gate's job,
and it probes behaviour instead of trusting what a plugin says about itself.
"""

from __future__ import annotations

import os
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from placement.formula import load_policy_file
from placement.identity import plugin_identity
from placement.providers import BUILTINS, ExternalProvider

GROUP = "carbonspan.placement_policies"
ENV_POLICY_DIR = "CARBONSPAN_PLACEMENT_POLICY_DIR"


class UnknownPolicy(LookupError):
    """No provider by that name; the message lists the ones there are."""

    def __str__(self) -> str:  # LookupError would quote the message
        return str(self.args[0])


def policy_dir() -> Path:
    raw = os.environ.get(ENV_POLICY_DIR)
    if raw:
        return Path(raw).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "carbonspan" / "placement-policies"


def _plugins() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def _load_plugin(name: str, ep: Any) -> ExternalProvider:
    origin = f"entry point {GROUP}:{name} = {ep.value}"
    try:
        obj = ep.load()
    except Exception as exc:  # a broken plugin must not take placement down silently
        raise UnknownPolicy(f"placement provider {name!r} failed to load ({origin}): {exc}") from exc
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "score")):
        obj = obj()
    if not callable(getattr(obj, "score", None)):
        raise UnknownPolicy(f"placement provider {name!r} ({origin}) has no score(clusters, job)")
    return ExternalProvider(name, obj, origin, plugin_identity(name, ep))


def available() -> dict[str, str]:
    """name -> where it comes from, for ``policy list`` and error messages."""
    names = {n: "built-in" for n in BUILTINS}
    names.update({n: f"entry point {ep.value}" for n, ep in _plugins().items() if n not in names})
    d = policy_dir()
    if d.is_dir():
        for f in sorted(d.glob("*.yaml")):
            names.setdefault(f.stem, f"YAML {f}")
    return names


def get_provider(name: str) -> Any:
    """The provider called ``name`` (or the YAML policy at path ``name``)."""
    if name in BUILTINS:
        return BUILTINS[name]()
    plugins = _plugins()
    if name in plugins:
        return _load_plugin(name, plugins[name])
    path = Path(name).expanduser()
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return load_policy_file(path)
    candidate = policy_dir() / f"{name}.yaml"
    if candidate.is_file():
        provider = load_policy_file(candidate)
        if provider.name != name:  # evaluations are recorded under the name inside the file
            raise UnknownPolicy(
                f"{candidate} declares name {provider.name!r}; rename the file or the policy "
                "so they agree"
            )
        return provider
    if name == "forecast-greedy":
        raise UnknownPolicy(
            "forecast-greedy is an evaluation candidate (it schedules start times over a "
            "trace), not a placement provider; evaluate it with 'carbonspan policy evaluate'"
        )
    raise UnknownPolicy(
        f"no placement policy named {name!r}; available: {', '.join(sorted(available()))} "
        f"(or a path to a .yaml formula policy, or NAME.yaml in {policy_dir()})"
    )
