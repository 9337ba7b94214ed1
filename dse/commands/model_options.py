"""`--model-file`, `--max-positions`, `--rope-scaling`: the model choice flags of dse sim, capacity, serve and
trace (traces.model_files for the file format and what an override means). `--model` itself may be the
path of a local model (traces.model_metadata: a .gguf file or a Hugging Face directory).

    @model_options
    @click.command()
    def command(model, model_file, max_positions, rope_scaling, ...):
        model = choose_model(model, model_file, max_positions, rope_scaling)

`choose_model` makes the chosen spec what `traces.models.get_model(name)` returns for the rest of the
command (undone when the command's click context closes) and says on stderr what it changed. Never imports
torch.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

__all__ = ["model_options", "choose_model"]


def model_options(command: Callable) -> Callable:
    """The three flags (module docstring)."""
    options = [
        click.option("--model-file", type=click.Path(path_type=Path), default=None,
                     help="a YAML model file (docs/models.md): its model is used, named by its `name` "
                     "(--model may be left out or must match); files in $FREEKV_DSE_MODELS are found by "
                     "name"),
        click.option("--max-positions", type=click.IntRange(min=1), default=None,
                     help="override the model's maximum positions (context length it serves)"),
        click.option("--rope-scaling", default=None, metavar="none|yarn:F|linear:F",
                     help="override the model's rope scaling (e.g. yarn:4 over its original positions; "
                     "positions become original x F unless --max-positions is given)"),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def choose_model(model: str | None, model_file: Path | None, max_positions: int | None,
                 rope_scaling: str | None) -> str:
    """The model name the command goes on with; registers a --model-file's spec or an overridden one
    (traces.models.use_model) for this command. DseError when neither --model nor --model-file is given
    or they disagree."""
    from dse.errors import DseError
    from traces.model_files import load_model_file, with_positions
    from traces.model_metadata import is_model_path
    from traces.models import get_model, use_model

    spec = None
    if model_file is not None:
        spec = load_model_file(model_file)
        if model is not None and model != spec.name:
            raise DseError(f"--model {model!r} differs from the name {spec.name!r} in --model-file "
                           f"{model_file}; give one of them, or the same name")
    elif model is None:
        raise DseError("give --model NAME (a registry name or a model file's in $FREEKV_DSE_MODELS: "
                       "docs/models.md), --model PATH (a .gguf file or a Hugging Face directory) or "
                       "--model-file PATH")
    elif is_model_path(model):  # a local model: its shape is read from its metadata, and said below
        spec = get_model(model)
    if max_positions is not None or rope_scaling is not None:
        spec = with_positions(spec or get_model(model), max_positions, rope_scaling)
    if spec is None:
        return str(model)
    undo = use_model(spec)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.call_on_close(undo)
    scaling = spec.rope_scaling
    scaled = (f"{scaling['rope_type']} x{float(scaling['factor']):g}" if scaling else "none")
    click.echo(f"model {spec.name}: {spec.n_layers} layers, {spec.n_qo_heads}/{spec.n_kv_heads} query/KV "
               f"heads, {spec.max_position_tokens} positions, rope scaling {scaled} ({spec.source})",
               err=True)
    return spec.name
