"""The finish-time law's days without spot capacity (tpopt.models.finish SOURCES "capacity"). With capacity on a
day with probability a (independent days), each day of work is followed by a Geometric number of days without
capacity: mean (1 - a) / a, variance (1 - a) / a^2 days. The source fires 1 - a times per day of work, a day / a
each, so the law's waits have exactly that mean and variance; and a scenario off the spot market has none."""

from __future__ import annotations

import pytest

from tpopt.models import finish as Fn
from tpopt.models.units import DAY


def law(a: float, work: float = 20 * DAY) -> Fn.Distribution:
    risk = Fn.Risk(step_sigma=0.0, slow_rate_per_card_s=0.0, spot_availability=a)
    x = Fn.Exposure(cards=8.0, tau=1800.0, lag=0.0, restore=120.0, card_mtbf_s=None, spike_interval_s=None,
                    risk=risk)
    return Fn.plan_distribution(reserved=0.0, work=work, pause=0.0, exposure=x, sigma=0.0)


@pytest.mark.parametrize("a", [0.5, 0.9, 0.99])
def test_the_waits_have_the_geometric_days_mean_and_variance(a):
    W = 20 * DAY
    d = law(a)
    assert d.mean() - W == pytest.approx((1 - a) / a * W, rel=1e-9)
    k = d.events.cumulants() * W  # per second of progress (no rollback source here: no failures, no preemptions)
    assert k[1] == pytest.approx((1 - a) / a ** 2 * W * DAY, rel=1e-9)


def test_always_there_adds_nothing():
    assert law(1.0).mean() == pytest.approx(20 * DAY, rel=1e-12)


def test_availability_outside_the_unit_interval_is_refused():
    with pytest.raises(Exception, match="spot availability must lie in"):
        Fn.Risk(spot_availability=0.0)
