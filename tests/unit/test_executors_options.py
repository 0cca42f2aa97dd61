"""The shared study flags (cli/study_options.py): what each builds, and bad combinations."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from jouleprof.bench.executors import LocalExecutor
from jouleprof.bench.executors_slurm import SlurmConfig, SlurmExecutor
from jouleprof.cli.study_options import RunOptions, build_run_options, run_options


def test_flags_build_the_executor():
    local = build_run_options(parallel_gpus="0,2", cooldown_max_s=30)
    assert isinstance(local.executor, LocalExecutor) and local.executor.gpus == [0, 2]
    assert local.executor.cooldown.max_s == 30
    assert build_run_options(cooldown_max_s=0).executor.cooldown is None
    slurm = build_run_options(
        executor="slurm", slurm_partition="gpu", slurm_account="proj", slurm_time=30,
        slurm_max_parallel=4, slurm_mem_gb=64, retry_failed=True,
    )  # fmt: skip
    assert isinstance(slurm.executor, SlurmExecutor) and slurm.retry_failed
    c = slurm.executor.config
    assert (c.partition, c.account, c.time_min, c.max_parallel, c.mem_gb) == (
        "gpu",
        "proj",
        30,
        4,
        64,
    )
    assert slurm.matrix_kwargs() == {"executor": slurm.executor, "retry_failed": True}


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"slurm_partition": "gpu"}, "--slurm-partition need --executor slurm"),
        ({"executor": "slurm", "parallel_gpus": "0"}, "use --executor local"),
        ({"executor": "cloud"}, "choose local or slurm"),
        ({"parallel_gpus": "0,0"}, "distinct"),
        ({"cooldown_max_s": -1}, "cooldown-max-s"),
    ],
)
def test_bad_combinations_say_what_to_do(kw, message):
    with pytest.raises((ValueError, typer.BadParameter), match=message):
        build_run_options(**kw)


def test_slurm_config_checks_its_fields():
    with pytest.raises(ValueError, match="max_parallel"):
        SlurmConfig(max_parallel=0)
    with pytest.raises(ValueError, match="time_min"):
        SlurmConfig(time_min=0)


def test_a_command_gets_the_flags_and_its_run_options():
    app = typer.Typer()
    seen = {}

    @app.command()
    @run_options
    def cmd(name: str = "x", run_options: RunOptions = None) -> None:
        seen.update(name=name, opts=run_options)

    r = CliRunner().invoke(app, ["--name", "y", "--executor", "slurm", "--slurm-partition", "p"])
    assert r.exit_code == 0, r.output
    assert seen["name"] == "y" and seen["opts"].executor.config.partition == "p"
    r = CliRunner().invoke(app, ["--slurm-time", "5"])
    assert r.exit_code == 2 and "need --executor slurm" in r.output


def test_comma_separated_numbers_name_the_flag_when_bad():
    from jouleprof.cli.study_options import parse_numbers

    assert parse_numbers("1, 2,4,", "--batch-sizes") == (1, 2, 4)
    assert parse_numbers("0,1e-3", "--lambdas", float) == (0.0, 1e-3)
    with pytest.raises(typer.BadParameter, match="--batch-sizes takes comma-separated integers"):
        parse_numbers("1,x", "--batch-sizes")
    with pytest.raises(typer.BadParameter, match="--lambdas takes comma-separated numbers"):
        parse_numbers("0,a", "--lambdas", float)
    with pytest.raises(typer.BadParameter, match="--lambdas is empty"):
        parse_numbers(" , ", "--lambdas", float)
