"""The market at the per-operation model's speed (issue 38): CPU seconds of two ``tpopt solve`` runs.

1. ``tpopt init --model llama3-8b --hw h100-sxm`` without the efficiency line (the per-operation model), with
   ``[market] offers = "all"`` and ``spot_shares = [0.25, 0.5]`` (13 offers of the built-in catalog), solved
   with ``--deadline 20d``;
2. a synthetic catalog of 200 offers (10 accelerators x 5 providers x 4 regions: on-demand, spot, a 30-day
   reservation and hourly-billed on-demand, prices and caps spread per region) under ``--hw all``.

Each run is a subprocess of the command line (start-up included); its CPU time is the children's user + system
time (``resource.getrusage``), best of ``--repeat``, printed with the load average beside it. ``--tpopt`` runs
another installation (the baseline: ``/work/main/.venv/bin/tpopt``).

    python benchmarks/market_speed.py [--tpopt PATH] [--repeat 3] [--time-limit 600] [--only 13|200]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ACCELERATORS = ("h100-sxm", "h200", "b200", "a100-80gb-sxm", "a100-40gb-sxm", "l40s", "rtx4090", "rtx5090",
                "h100-pcie", "mi300x")
PROVIDERS = ("alpha", "bravo", "charlie", "delta", "echo")
REGIONS = ("north", "south", "east", "west")
MARKETS = (("on-demand", ""), ("spot", 'preempt_per_card_hour = 0.0005\nreacquire = "30min"\n'),
           ("reserved", 'term = "30d"\n'), ("on-demand", 'billing = "1h"\n'))
BASE_PRICE = {"h100-sxm": 2.9, "h200": 3.7, "b200": 5.9, "a100-80gb-sxm": 1.8, "a100-40gb-sxm": 1.3, "l40s": 1.0,
              "rtx4090": 0.6, "rtx5090": 0.9, "h100-pcie": 2.4, "mi300x": 2.5}


def tpopt_default() -> str:
    return str(Path(sys.executable).with_name("tpopt"))


def scenario_13(tpopt: str, folder: Path) -> list[str]:
    """The issue's scenario (written by ``tpopt init``, the efficiency line deleted, the market added)."""
    subprocess.run([tpopt, "init", "--model", "llama3-8b", "--hw", "h100-sxm"], cwd=folder, check=True,
                   capture_output=True)
    path = folder / "scenario.toml"
    text = "\n".join(line for line in path.read_text().splitlines()
                     if not line.startswith("efficiency =") and "line for the per-operation model" not in line)
    path.write_text(text + '\n\n[market]\noffers = "all"\nspot_shares = [0.25, 0.5]\n')
    return ["solve", "--scenario", str(path), "--deadline", "20d"]


def catalog_200(folder: Path) -> Path:
    """offers.toml with 10 accelerators x 5 providers x 4 regions (one market per region, see the module)."""
    lines = []
    for p in PROVIDERS:
        for r in REGIONS:
            lines += [f'[region."{p}/{r}"]', 'source = "benchmark: synthetic"', ""]
    for a in ACCELERATORS:
        for i, p in enumerate(PROVIDERS):
            for j, r in enumerate(REGIONS):
                market, extra = MARKETS[j]
                price = BASE_PRICE[a] * (1 + 0.07 * i) * (0.45 if market == "spot" else 0.6 if market == "reserved"
                                                          else 1.0)
                lines += [f"[offer.{a.replace('-', '_')}_{p}_{r}]", f'provider = "{p}"', f'region = "{r}"',
                          f'accelerator = "{a}"', "cards_per_host = 8", f'market = "{market}"',
                          f"price_card_hour = {price:.4f}", f"available = {64 * (i + 1) * (j + 1)}",
                          'date = "2026-10"', 'source = "benchmark: synthetic"', extra]
    cat = folder / "cat200"
    cat.mkdir()
    (cat / "offers.toml").write_text("\n".join(lines) + "\n")
    return cat


def scenario_200(tpopt: str, folder: Path) -> list[str]:
    argv = scenario_13(tpopt, folder)
    path = folder / "scenario.toml"
    path.write_text(path.read_text().split("\n[market]")[0] + "\n")  # --hw all makes the market
    return [*argv, "--hw", "all", "--catalog", str(catalog_200(folder))]


def run(tpopt: str, argv: list[str], time_limit: float) -> tuple[float, dict[str, object]]:
    """(CPU s of the child, its JSON report's status and offer counts)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([tpopt, *argv, "--time-limit", f"{time_limit:g}", "--json"], capture_output=True,
                         text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    try:
        d = json.loads(out.stdout)
    except json.JSONDecodeError:
        return cpu, {"error": out.stderr.strip().splitlines()[-1:] or out.returncode}
    rows = d.get("market", {}).get("offers", [])
    decided = sum(r["status"] in ("optimal", "infeasible", "bounded") for r in rows)  # bounded: by its cost bound
    pick = (d.get("market", {}).get("offer") or {}).get("id")
    return cpu, {"status": d.get("status"), "offers": len(rows), "decided": decided,
                 "time_limit_reached": d.get("solver", {}).get("time_limit_reached"), "pick": pick,
                 "cost": d.get("metrics", {}).get("cost")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tpopt", default=tpopt_default())
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=600.0)
    ap.add_argument("--only", choices=("13", "200"))
    args = ap.parse_args()
    cases = {"13": scenario_13, "200": scenario_200}
    for name, make in cases.items():
        if args.only and name != args.only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            argv = make(args.tpopt, Path(tmp))
            best, facts = float("inf"), {}
            for _ in range(args.repeat):
                cpu, facts = run(args.tpopt, argv, args.time_limit)
                best = min(best, cpu)
            load = Path("/proc/loadavg").read_text().split()[0] if os.path.exists("/proc/loadavg") else "?"
            print(f"{name}-offer market: {best:.2f} CPU s (best of {args.repeat}; load {load}); {facts}")


if __name__ == "__main__":
    main()
