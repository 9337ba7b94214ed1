"""User-facing errors: bad input gets one clear paragraph, never a traceback."""

from __future__ import annotations

__all__ = ["DseError", "user_error_types"]


class DseError(ValueError):
    """An error in what the user asked of `dse` (study file, CLI option, storage URL)."""


def user_error_types() -> tuple[type[BaseException], ...]:
    """Error types whose message is shown to the user as is (without a traceback).

    Each package defines its own input-error class; collected here lazily so that importing the CLI
    does not import torch.
    """
    import traces
    from traces.catalogue import KnobError, UnknownMethodError
    from traces.models import ModelFileError, UnknownModelError

    types: list[type[BaseException]] = [DseError, UnknownModelError, ModelFileError, UnknownMethodError,
                                        KnobError, FileNotFoundError]
    for module, name in [
        ("traces", "TraceError"),
        ("traces.user_files", "UserFileError"),
        ("traces.numbers", "NumberError"),
        ("sim", "SimInputError"),
        ("freekv_runtime.config", "RuntimeConfigError"),
        ("freekv_runtime.errors", "RuntimeInputError"),
    ]:
        try:
            mod = __import__(module, fromlist=[name])
            types.append(getattr(mod, name))
        except (ImportError, AttributeError):
            continue
    del traces
    return tuple(types)
