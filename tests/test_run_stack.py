"""A measured-run table's software stack is decided in one place (tpopt.optimizer.runs.run_stack): the stack a run
is modelled on and the source its stack line names are one answer, in the order scenario [hardware] stack, a
'# stack.RUN' line, the row's stack cell, the table's '# stack = NAME', the assumed default. (They were two
functions, stack_source and runs_from_csv's own choice, which had to agree.) A row's unknown stack cell stays an
error naming the run whichever source wins, a scenario's stack included."""

from __future__ import annotations

import pytest

from tpopt.errors import InputError
from tpopt.optimizer.runs import DEFAULT_TABLE_STACK, STACK_ASSUMED, runs_from_csv

HEAD = "run,model,accelerator,seq_len,global_batch,tp,pp,cards,micro_batch,iteration_s,stack\n"
ROW = "r1,qwen3-8b,h100-sxm,4096,64,1,1,8,1,10.0,{cell}\n"
TABLE_LINE, RUN_LINE, SCENARIO = "the table's '# stack = NAME' line", "the table's '# stack.RUN' line", \
    "the scenario's [hardware] stack"


def _stack(tmp_path, cell: str = "", lines: str = "", base_raw: dict | None = None) -> tuple[str, str, str]:
    """(the stack the run's stack line names, its source, the stack its scenario was built on)."""
    path = tmp_path / "runs.csv"
    path.write_text(lines + HEAD + ROW.format(cell=cell))
    (run,) = runs_from_csv(path, base_raw=base_raw)
    return run.extra["stack"]["name"], run.extra["stack"]["source"], run.scenario.stack.name


@pytest.mark.parametrize("cell, lines, base_raw, want", [
    ("", "", None, (DEFAULT_TABLE_STACK, STACK_ASSUMED)),
    ("", "# stack = megatron-core\n", None, ("megatron-core", TABLE_LINE)),
    ("torchtitan", "# stack = megatron-core\n", None, ("torchtitan", "the row's stack cell")),
    ("torchtitan", "# stack = megatron-core\n# stack.r1 = torchtitan-compile\n", None,
     ("torchtitan-compile", RUN_LINE)),
    ("torchtitan", "# stack = megatron-core\n", {"hardware": {"stack": "deepspeed"}}, ("deepspeed", SCENARIO)),
    # a scenario without a stack: the table's (the row's cell and run lines are the table's own voice)
    ("torchtitan", "# stack = megatron-core\n", {"hardware": {}}, ("megatron-core", TABLE_LINE)),
    ("torchtitan", "", {"hardware": {}}, (DEFAULT_TABLE_STACK, STACK_ASSUMED)),
])
def test_the_stack_a_run_is_modelled_on_is_the_one_its_stack_line_names(tmp_path, cell, lines, base_raw, want):
    name, source, built = _stack(tmp_path, cell, lines, base_raw)
    assert (name, source) == want and built == name


@pytest.mark.parametrize("base_raw", [None, {"hardware": {}}, {"hardware": {"stack": "deepspeed"}}])
def test_an_unknown_stack_cell_is_an_error_with_or_without_a_scenario(tmp_path, base_raw):
    with pytest.raises(InputError, match=r"^runs\.csv: run r1: stack 'no-such-stack' unknown \(known: "):
        _stack(tmp_path, "no-such-stack", "# stack = megatron-core\n", base_raw)
