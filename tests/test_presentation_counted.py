"""presentation.counted: one text of a counted noun (singular for exactly one)."""

from tpopt.presentation import counted, plan_line


def test_counted_nouns():
    assert counted(1, "host") == "1 host"
    assert counted(8, "host") == "8 hosts"
    assert counted(0, "card") == "0 cards"
    assert counted(1024, "card") == "1,024 cards"
    assert counted(2, "copy", "copies") == "2 copies"


def test_plan_line_of_one_host_one_nic():
    plan = {"accelerator": "h100-sxm", "cards": 8, "hosts": 1, "zero_stage": 1, "tp": 8, "pp": 1, "dp": 1,
            "micro_batch": 1, "grad_accum": 4, "recompute": "none", "save_interval_s": 1800.0, "save_mode": "sync",
            "nics_per_host": 1}
    line = plan_line(plan)
    assert "h100-sxm x 8 (1 host)" in line and "| 1 NIC/host" in line
