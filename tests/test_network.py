"""The network as data (models/network.py): tiers from the catalog, one route for every collective."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from tpopt.catalogs import load_catalog
from tpopt.errors import InputError
from tpopt.models import comm, context, moe
from tpopt.models import rl as R
from tpopt.models.network import Fabric, Tier, host_fabric, route

CAT = load_catalog()
RTX = CAT.accelerator("rtx4090")
H100 = CAT.accelerator("h100-sxm")


def test_catalog_tiers_default_to_one_host_domain():
    # the scale-up domain is one host at today's intra-host bandwidth (no P2P: the PCIe host link)
    f = RTX.fabric
    assert isinstance(f, Fabric) and [t.name for t in f.tiers][:2] == ["scale-up", "scale-out"]
    assert f.scale_up == Tier("scale-up", 8, 32e9) and not f.p2p
    assert f.tiers[1].bandwidth == 25e9 and f.tiers[1].cards == math.inf and f.host_link_bw == 32e9
    assert H100.fabric.scale_up.bandwidth == 450e9 and H100.fabric.host_link_bw == 64e9
    for a in CAT.accelerators.values():
        assert a.fabric.scale_up.cards == a.cards_per_host
        assert a.intra_host_bw == (a.interconnect_bw if a.p2p and a.interconnect_bw > 0 else a.host_link_bw)


def test_chapter_figures_through_route():
    # RTX 4090: 32 GB/s (8 x 200 Gbit/s NICs are not the bottleneck); one shared 200 Gbit/s NIC: 25 GB/s
    assert float(route(RTX.fabric, 48, 1, 1, 8).bandwidth) == 32e9
    assert float(route(RTX.fabric, 48, 1, 1, 1).bandwidth) == 25e9
    assert float(comm.dp_ring_bandwidth(RTX.fabric, 1, 48, 1)) == 25e9
    # inside the host: level 0, the scale-up bandwidth whatever the NICs
    r = route(H100.fabric, 4, 2, 2, 1)
    assert int(r.level) == 0 and float(r.bandwidth) == 450e9


def test_route_levels_and_shares_vectorised():
    f = host_fabric(8, 450e9, 50e9, host_link_bw=64e9)
    dp = np.array([1, 4, 8, 16])
    r = route(f, dp, 2, 2, 8)
    assert r.level.tolist() == [0, 0, 1, 1]
    assert r.bandwidth.tolist() == [450e9, 450e9, 200e9, 200e9]  # 8 x 50 / 2 rings per host
    # a direct send (pipeline boundary) leaves through the host link: min(64, 8 x 50 / 8)
    assert float(route(f, 4, 8, 8, 8, direct=True).bandwidth) == 50e9
    assert float(route(f, 4, 8, 8, 1, direct=True).bandwidth) == 6.25e9
    assert float(comm.pp_link_bandwidth(f, 2, 4, 8)) == 450e9  # 8 cards: one host
    assert float(comm.pp_link_bandwidth(f, 4, 4, 8)) == 50e9


def test_collectives_match_the_old_formulas():
    # the formulas as they were before the tiers, for every layout of a small grid
    intra, nic, g, host = 450e9, 50e9, 8, 64e9
    f = host_fabric(g, intra, nic, host_link_bw=host)
    for tp in (1, 2, 4, 8):
        for d in (1, 2, 3, 4, 8, 16, 48):
            for k in (1, 2, 8):
                old_dp = intra if d * tp <= g else min(intra, k * nic / tp)
                assert float(comm.dp_ring_bandwidth(f, tp, d, k)) == old_dp
                old_cp = intra if d * tp <= g else min(intra, k * nic / g)
                assert float(context.cp_bandwidth(f, tp, d, k, "all-to-all")) == old_cp
                cards = tp * d
                old_pp = intra if cards <= g else min(host, k * nic / g)
                assert float(comm.pp_link_bandwidth(f, d, tp, k)) == old_pp


def test_a2a_uses_the_route_tiers():
    f = host_fabric(8, 32e9, 25e9, p2p=False)
    path = route(f, 16, 1, 8, 1)
    assert path.scale_up == 32e9 and float(path.scale_out) == 25e9 / 8
    t = float(moe.a2a_time(1000, 1024, 2.0, 1.0, 1.0, 1.0, path, False))
    per_row = 1000 * 1024 * 2.0
    assert t == max(2 * per_row / 32e9, per_row / (25e9 / 8))
    # the per-operation model derates each tier by its collective efficiency
    d = f.derated(0.5, 0.25)
    assert d.scale_up.bandwidth == 16e9 and d.tiers[1].bandwidth == 6.25e9


def test_weight_sync_host_bandwidth():
    # one learner host with 8 x 50 GB/s NICs: 400 GB/s per host
    assert R.host_nic_bandwidth(H100.fabric, 24, 8) == 400e9
    t = R.network_sync_time(2e9, 16, 8, R.host_nic_bandwidth(H100.fabric, 24, 8), 400e9)
    assert t == pytest.approx(max(32e9 / 400e9, 16e9 / 400e9))


def test_scale_up_domain_of_several_hosts(tmp_path):
    # an NVL-style domain of 4 hosts: a ring of 32 cards stays on the scale-up tier
    f = host_fabric(8, 900e9, 50e9, scale_up_cards=32)
    assert float(comm.dp_ring_bandwidth(f, 1, 32, 8)) == 900e9
    assert float(comm.dp_ring_bandwidth(f, 1, 64, 8)) == 400e9
    a = replace(H100, scale_up_cards=16)
    assert a.fabric.scale_up.cards == 16 and float(route(a.fabric, 16).bandwidth) == 450e9
    (tmp_path / "accelerators.toml").write_text('[h100-sxm]\n' + _h100_table() + 'scale_up_cards = 12\n')
    with pytest.raises(InputError, match="whole number of hosts"):
        load_catalog([tmp_path])


def _h100_table() -> str:
    return ('peak_bf16 = "989TFLOP/s"\nmemory = "80GB"\nhost_link = "pcie5-x16"\np2p = true\n'
            'interconnect = "nvlink4"\ncards_per_host = 8\nnic = "400g"\nnics_per_host = 8\n')


def test_spine_oversubscription_halves_cross_pod_rings(tmp_path):
    # H100 hosts in pods of 4 under a 2:1 spine (catalog keys pod_hosts, spine_oversubscription)
    (tmp_path / "accelerators.toml").write_text('[h100-sxm]\n' + _h100_table()
                                                + 'pod_hosts = 4\nspine_oversubscription = 2\n')
    a = load_catalog([tmp_path]).accelerator("h100-sxm")
    assert [t.name for t in a.fabric.tiers] == ["scale-up", "scale-out", "spine"] and a.fabric.tiers[1].cards == 32
    # tp 8 x dp 8 spans 8 hosts, two pods: 8 x 50 GB/s / 8 rings = 50 GB/s, halved by the spine
    flat = float(comm.dp_ring_bandwidth(H100.fabric, 8, 8, 8))
    assert flat == 50e9 and float(comm.dp_ring_bandwidth(a.fabric, 8, 8, 8)) == flat / 2
    # tp 8 x dp 4 fills one pod: unchanged; inside a host: unchanged
    assert float(comm.dp_ring_bandwidth(a.fabric, 8, 4, 8)) == float(comm.dp_ring_bandwidth(H100.fabric, 8, 4, 8))
    assert float(comm.dp_ring_bandwidth(a.fabric, 1, 8, 8)) == 450e9
    # an all-to-all leaving the pod too, and the levels say which tier each group crosses
    assert float(context.cp_bandwidth(a.fabric, 8, 8, 8, "all-to-all")) == 25e9
    assert route(a.fabric, np.array([8, 32, 64])).level.tolist() == [0, 1, 2]
    # neutral defaults: no pods, or a 1:1 spine, change nothing
    neutral = replace(H100, pod_hosts=4)
    assert float(comm.dp_ring_bandwidth(neutral.fabric, 8, 8, 8)) == flat
    (tmp_path / "accelerators.toml").write_text('[h100-sxm]\n' + _h100_table() + 'spine_oversubscription = 0.5\n')
    with pytest.raises(InputError, match="at least 1"):
        load_catalog([tmp_path])


def test_neutral_tier_fields_stay_out_of_the_repr():
    # sweep fingerprints hash repr(accelerator): the shipped catalogs' hashes stay as before the tiers
    r = repr(RTX)
    assert "scale_up_cards" not in r and "pod_hosts" not in r and "spine_oversubscription" not in r
    assert r.startswith("Accelerator(name='rtx4090', peak_flops=") and "sources={" in r
    assert "pod_hosts=4" in repr(replace(RTX, pod_hosts=4)) and "spine_oversubscription=2.0" in repr(
        replace(RTX, spine_oversubscription=2.0))
