"""`dse sim calibrate`: fit a hardware profile to a trace's measured timings, or calibrate a hardware and
a software profile from a GPU microbenchmark file.

    dse sim calibrate TRACE --hardware H [--out fitted.yaml] [--json]
    dse sim calibrate --microbench FILE --hardware H [--software S] --out DIR [--json]

Never imports torch.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from dse.commands.number_types import number
from traces.numbers import OPEN_FRACTION

__all__ = ["calibrate_command"]


@click.command("calibrate")
@click.argument("trace", type=click.Path(path_type=Path), required=False)
@click.option("--hardware", required=True, help="profile to fit (name or YAML file)")
@click.option(
    "--microbench",
    type=click.Path(path_type=Path),
    help="calibrate from a GPU microbenchmark JSON (schema freekv-dse-microbench/1) instead of a trace",
)
@click.option("--software", default=None, help="software profile to calibrate with --microbench")
@click.option("--train-fraction", default=0.6, show_default=True, type=number(OPEN_FRACTION))
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="write the fitted profile as YAML; with --microbench a directory for both profiles",
)
@click.option("--json", "as_json", is_flag=True)
def calibrate_command(
    trace: Path | None,
    hardware: str,
    microbench: Path | None,
    software: str | None,
    train_fraction: float,
    out: Path | None,
    as_json: bool,
) -> None:
    """Fit HARDWARE's achievable fractions and overheads to TRACE's measured GPU timings, or calibrate
    HARDWARE and a software profile from a microbenchmark file (--microbench FILE --out DIR)."""
    from dse.paths import check_output_file, write_text
    from sim.calibrate import calibrate
    from sim.errors import SimInputError

    if microbench is not None:
        if trace is not None:
            raise SimInputError("dse sim calibrate: give either a TRACE or --microbench FILE, not both")
        _calibrate_microbench(microbench, hardware, software, out, as_json)
        return
    if trace is None:
        raise SimInputError("dse sim calibrate needs a TRACE directory or --microbench FILE")
    if out is not None:
        check_output_file(out, "--out")
    cal = calibrate(trace, hardware, train_fraction)
    if out is not None:
        import yaml

        data = cal.profile.to_dict()
        write_text(out, yaml.safe_dump(data, sort_keys=False), "--out")
    if as_json:
        click.echo(json.dumps(cal.to_dict(), indent=2))
        return
    click.echo(f"calibrated {cal.profile.name} on {cal.n_train} steps, tested on {cal.n_test} held-out steps")
    for p in cal.before:
        click.echo(f"  {p}: {cal.before[p]:.4g} -> {cal.after[p]:.4g}")
    click.echo(
        f"step_total error: train {cal.train_error:.2%}, held-out {cal.test_error:.2%} "
        f"(uncalibrated {cal.test_error_before:.2%})"
    )
    for note in cal.notes:
        click.echo(f"note: {note}")


def _calibrate_microbench(
    path: Path, hardware: str, software: str | None, out: Path | None, as_json: bool
) -> None:
    from sim.calibrate_microbench import calibrate_microbench
    from sim.errors import SimInputError
    from sim.software import DEFAULT_SOFTWARE

    if out is None:
        raise SimInputError(
            "dse sim calibrate --microbench needs --out DIR (the calibrated hardware and software YAML "
            "files are written there)"
        )
    cal = calibrate_microbench(path, hardware, software or DEFAULT_SOFTWARE)
    hw_path, sw_path = cal.write(out)
    if as_json:
        click.echo(
            json.dumps({**cal.to_dict(), "files": [str(hw_path), str(sw_path)]}, indent=2, default=str)
        )
        return
    click.echo(f"wrote {hw_path} (hardware {cal.hardware.name}) and {sw_path} (software {cal.software.name})")
    for key, (before, after, _) in cal.changed.items():
        click.echo(f"  {key}: {before} -> {after}")
    for note in cal.notes:
        click.echo(f"note: {note}")
    click.echo(
        f"use: FREEKV_DSE_PROFILES={out} dse sim ... --hardware {cal.hardware.name} "
        f"--software {cal.software.name}"
    )
