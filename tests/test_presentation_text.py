"""presentation: one text of a counted noun (singular for exactly one) and of a probability."""

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


def test_one_text_of_a_probability():
    """P(on time) reads the same in the footing's evidence line and the spot policy's lines: "88.5 %", the
    space before "%" as every report puts it (it read "88.5%" in the spot policy's lines)."""
    from tpopt.presentation import evidence_lines, probability_text

    assert probability_text(0.885) == "88.5 %" and probability_text(1.0) == "100.0 %"
    e = {"sigma": 0.1, "reasons": ["r"], "source": "s", "p_on_time": 0.885}
    assert evidence_lines(e)[0].endswith("P(on time) 88.5 % at this sigma")
