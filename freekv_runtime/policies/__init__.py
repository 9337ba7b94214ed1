"""KV policies by name, from the method catalogue (traces.catalogue): every entry with a runtime policy.

Adding a method: one file here with a `KVPolicy` subclass, and its catalogue entry naming it
("freekv_runtime.policies.<file>:<Class>"); nothing to register here. A page-selection method (as
FreeKV, Quest, ArkVale) implements the hooks of the paged-retrieval mechanism instead: see the checklist
in _paged_retrieval.py.
"""

from __future__ import annotations

from freekv_runtime.config import RuntimeConfig, RuntimeConfigError
from traces.catalogue import entry, import_target, names

__all__ = ["policy_names", "policy_class", "make_policy"]


def policy_names() -> tuple[str, ...]:
    """Methods with a runtime policy, in the catalogue's order."""
    return names(runtime=True)


def policy_class(method: str) -> type:
    """The KVPolicy class of `method` (imports its module); RuntimeConfigError for a name without one."""
    from traces.catalogue import UnknownMethodError

    try:
        target = entry(method, runtime=True).policy
    except UnknownMethodError as exc:
        raise RuntimeConfigError(str(exc)) from None
    assert target is not None
    return import_target(target)


def make_policy(config: RuntimeConfig):
    """The policy named by `config.method`, configured."""
    return policy_class(config.method)(config)
