"""Filters and weighers against a hand-worked host set.

    host  cores  MHz/core  memory  used mem  free mem  used cores  tasks
    H0    4      2000      8000    2000      6000      1           1
    H1    8      2000      16000   12000     4000      6           3
    H2    4      3000      8000    0         8000      0           0
    H3    2      2000      2000    0         2000      0           0

The task asks 2 cores, 4000 MHz (2000 per core), 3000 memory: H3 fails Ram (2000 < 3000),
the others fit. Raw weights over the fitting hosts H0, H1, H2 and their min-max normalisation:

    Ram (free memory)      6000, 4000, 8000   -> 0.5, 0, 1
    CoreRam (free / core)  1500,  500, 2000   -> 2/3, 0, 1
    InstanceCount             1,    3,    0   -> 1/3, 1, 0
    VCpu (free cores)         3,    2,    4   -> 0.5, 0, 1
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.policy import Filter, FilterPolicy, HostState, Request, Weigher
from scheduling.prefabs import PREFABS, make_policy
from scheduling.topology import SpecError, load_topology

TASK = Request(cpu_count=2, cpu_capacity=4000.0, memory=3000.0, key=1)


def host(name: str, cores: int, speed: float, mem: float) -> dict:
    return {"name": name, "cpu": {"coreCount": cores, "coreSpeed": speed}, "memory": {"memorySize": mem},
            "cpuPowerModel": {"modelType": "linear", "idlePower": 100, "maxPower": 200}}


def state() -> HostState:
    hosts = load_topology({"clusters": [{"name": "C", "hosts": [
        host("H0", 4, 2000, 8000), host("H1", 8, 2000, 16000), host("H2", 4, 3000, 8000),
        host("H3", 2, 2000, 2000)]}]})
    s = HostState(hosts)
    s.used_memory[:] = [2000, 12000, 0, 0]
    s.used_cores[:] = [1, 6, 0, 0]
    s.instances[:] = [1, 3, 0, 0]
    return s


def pick(policy, req: Request = TASK, s: HostState | None = None, seed: int = 0) -> str:
    s = s or state()
    h = policy.select(s, req, seed)
    return "none" if h < 0 else s.hosts.name[h].split("/")[1][:2]


BASE = (Filter("Compute"), Filter("VCpu"), Filter("Ram"))


@pytest.mark.parametrize("prefab, expected", [
    ("Mem", "H2"), ("MemInv", "H1"), ("CoreMem", "H2"), ("CoreMemInv", "H1"),
    ("ActiveServers", "H2"), ("ActiveServersInv", "H1"), ("ProvisionedCores", "H2"),
    ("ProvisionedCoresInv", "H1"), ("TaskNumMemorizing", "H2"),
])
def test_every_cpu_prefab_picks_the_hand_worked_host(prefab: str, expected: str) -> None:
    assert pick(PREFABS[prefab]) == expected


def test_prefab_names_are_case_insensitive_and_typos_are_refused() -> None:
    assert make_policy({"type": "prefab", "policyName": " meminv "}) is PREFABS["MemInv"]
    with pytest.raises(SpecError, match="policyName 'Memm'"):
        make_policy({"type": "prefab", "policyName": "Memm"})
    # OpenDC reads "name" as a label and silently runs Mem: here it is an error that says so
    with pytest.raises(SpecError, match="policyName"):
        make_policy({"type": "prefab", "name": "ProvisionedCpuGpuCores"})


def test_scores_are_multiplier_times_normalised_weight_once() -> None:
    rep = FilterPolicy(BASE, (Weigher("CoreRam", 2.0),)).explain(state(), TASK)
    scores = {r["host"][-4:-2]: r.get("score") for r in rep["hosts"]}
    assert scores["H0"] == pytest.approx(2 * (1500 - 500) / 1500)
    assert scores["H1"] == 0.0 and scores["H2"] == 2.0 and scores["H3"] is None
    assert rep["chosen"].endswith("H2-0")


def test_several_weighers_sum_and_ties_keep_host_order() -> None:
    # Ram + InstanceCount: H0 0.5 + 1/3, H1 0 + 1 = 1, H2 1 + 0 = 1: H1 and H2 tie, H1 is first
    policy = FilterPolicy(BASE, (Weigher("Ram", 1.0), Weigher("InstanceCount", 1.0)))
    assert pick(policy) == "H1"


def test_a_weigher_whose_weights_are_all_equal_is_skipped() -> None:
    s = state()
    s.used_memory[:] = [0, 8000, 0, 0]  # free memory 8000 on H0, H1, H2
    policy = FilterPolicy(BASE, (Weigher("Ram", 5.0), Weigher("InstanceCount", -1.0)))
    rep = policy.explain(s, TASK)
    assert rep["skipped_weighers"] == ["Ram"]
    assert pick(policy, s=s) == "H2"  # the fewest tasks decides alone


def test_decisions_are_stateless_across_calls() -> None:
    s, policy = state(), PREFABS["Mem"]
    first = policy.select(s, TASK)
    for cpu in (1, 2, 3, 4, 1):
        policy.select(s, Request(cpu, 1000.0 * cpu, 500.0, key=cpu))
    assert policy.select(s, TASK) == first


def test_filters_refuse_what_exceeds_the_physical_host_whatever_the_ratio() -> None:
    s = state()
    big_mem = Request(2, 4000.0, 3000.0)
    assert not Filter("Ram", allocation_ratio=2.0).test(s, big_mem)[3]  # 3000 > H3's 2000
    assert Filter("Ram", allocation_ratio=2.0).test(s, Request(2, 0, 2000.0))[3]
    four = Request(4, 0.0, 0.0)
    assert not Filter("VCpu").test(s, four)[1]  # H1: 8 - 6 = 2 free < 4
    assert Filter("VCpu", allocation_ratio=2.0).test(s, four)[1]  # 16 - 6 = 10 >= 4
    assert not Filter("VCpu", allocation_ratio=4.0).test(s, Request(9))[1]  # 9 > 8 physical


def test_capacity_instance_count_and_compute_filters() -> None:
    s = state()
    fast = Request(2, 5000.0, 0.0)  # 2500 MHz per core: only H2 (3000) has cores that fast
    assert list(Filter("VCpuCapacity").test(s, fast)) == [False, False, True, False]
    assert list(Filter("InstanceCount", limit=2).test(s, TASK)) == [True, False, True, True]
    s.up[2] = False
    assert list(Filter("Compute").test(s, TASK)) == [True, True, False, True]
    assert pick(PREFABS["MemInv"], s=s) == "H1"
    assert pick(PREFABS["CoreMem"], s=s) == "H0"  # H2 is down
    assert pick(PREFABS["Mem"], s=s) == "H2"  # Mem filters VCpu and Ram only, not Compute


def test_subset_size_draws_from_the_best_n_reproducibly() -> None:
    policy = FilterPolicy(BASE, (Weigher("Ram", 1.0),), subset_size=2)  # best two: H2, H0
    s = state()
    picks = [pick(policy, Request(2, 4000.0, 3000.0, key=k), s, seed=7) for k in range(60)]
    assert set(picks) == {"H2", "H0"}
    again = [pick(policy, Request(2, 4000.0, 3000.0, key=k), s, seed=7) for k in range(60)]
    assert picks == again
    other = [pick(policy, Request(2, 4000.0, 3000.0, key=k), s, seed=8) for k in range(60)]
    assert other != picks


def test_random_prefab_is_random_over_fitting_hosts_and_reproducible() -> None:
    s = state()
    picks = [pick(PREFABS["Random"], Request(2, 4000.0, 3000.0, key=k), s, seed=3) for k in range(80)]
    assert set(picks) == {"H0", "H1", "H2"}  # never H3, which does not fit
    assert picks == [pick(PREFABS["Random"], Request(2, 4000.0, 3000.0, key=k), s, seed=3) for k in range(80)]


def test_gpu_prefabs_check_free_gpu_cores() -> None:
    hosts = load_topology({"clusters": [{"hosts": [
        {**host("G0", 8, 2000, 8000), "gpu": {"count": 1, "coreCount": 4, "coreSpeed": 1000}},
        {**host("G1", 8, 2000, 8000), "gpu": {"count": 2, "coreCount": 4, "coreSpeed": 1000}},
        host("N0", 16, 2000, 8000)]}]})
    s = HostState(hosts)
    s.used_gpu[:] = [0, 6, 0]
    s.instances[:] = [2, 1, 0]
    req = Request(2, 0.0, 100.0, gpu_count=2)
    names = lambda h: hosts.name[h].split("/")[1][:2]  # noqa: E731
    # free GPU cores 4 and 2 (N0 has none and fails VGpu); free vCPUs all 8: VCpu is skipped
    assert names(PREFABS["ProvisionedCpuGpuCores"].select(s, req)) == "G0"
    assert names(PREFABS["ProvisionedCpuGpuCoresInv"].select(s, req)) == "G1"
    assert names(PREFABS["GpuTaskMemorizing"].select(s, req)) == "G1"  # fewest tasks among fitting
    assert PREFABS["GpuTaskMemorizing"].select(s, Request(2, 0.0, 100.0, gpu_count=5)) == -1
    assert np.array_equal(PREFABS["Mem"].fits(s, req), [True, True, True])  # Mem ignores GPUs


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 8000), st.integers(0, 3)), min_size=4, max_size=4),
       st.sampled_from([("Ram", 1.0), ("Ram", -1.0), ("CoreRam", 2.0), ("InstanceCount", -1.0), ("VCpu", 0.0)]),
       st.sampled_from([None, ("InstanceCount", 1.0), ("Ram", -0.5)]))
def test_the_best_host_shortcut_equals_the_full_ranking(used, first, second) -> None:
    s = state()
    s.used_cores[:] = [u[0] for u in used]
    s.used_memory[:] = [min(u[1], m) for u, m in zip(used, s.hosts.memory, strict=True)]
    s.instances[:] = [u[2] for u in used]
    weighers = (Weigher(*first), Weigher(*second)) if second else (Weigher(*first),)
    policy = FilterPolicy(BASE, weighers)
    fit = policy.fits(s, Request(1, 0.0, 100.0))
    if fit.any():
        assert policy.select(s, Request(1, 0.0, 100.0)) == int(policy.ranked(s, Request(1, 0.0, 100.0), fit)[0][0])


def test_vcpu_capacity_weigher_and_vgpu_capacity_filter() -> None:
    # per-core headroom: H0 2000 - 2000, H1 2000 - 2000, H2 3000 - 2000 -> H2 (+1), H0 (-1)
    s = state()
    assert pick(FilterPolicy(BASE, (Weigher("VCpuCapacity", 1.0),))) == "H2"
    assert pick(FilterPolicy(BASE, (Weigher("VCpuCapacity", -1.0),))) == "H0"
    hosts = load_topology({"clusters": [{"hosts": [
        {**host("G0", 8, 2000, 8000), "gpu": {"count": 1, "coreCount": 4, "coreSpeed": 1000}},
        {**host("G1", 8, 2000, 8000), "gpu": {"count": 1, "coreCount": 4, "coreSpeed": 1500}}]}]})
    g = HostState(hosts)
    # 2 GPU cores at 2400 MHz in all: 1200 per core; only G1's 1500 MHz cores are fast enough
    assert list(Filter("VGpuCapacity").test(g, Request(1, gpu_count=2, gpu_capacity=2400.0))) == [False, True]
    assert list(Filter("VGpuCapacity").test(g, Request(1))) == [True, True]  # no GPU asked
    del s


def test_the_summary_table_shows_each_timeshift_row_with_its_no_shift_reference() -> None:
    from scheduling.outputs import render_summary, summary_rows

    base = {"scenario": "s", "policy": "p", "energy_j": 3.6e6, "carbon_g": 900.0, "deadline_misses": 0,
            "tasks_with_deadline": 1, "mean_delay_ms": 0.0, "p95_delay_ms": 0.0}
    plain, shifted = summary_rows([base, {**base, "reference_carbon_g": 1000.0, "reduction_pct": 10.0}])
    assert plain["no_shift_kg"] is None and shifted["no_shift_kg"] == 1.0
    assert "no_shift_kg" in render_summary([base])


def test_the_summary_table_shows_whole_scenario_names() -> None:
    from scheduling.forecast import PERFECT_LABEL
    from scheduling.outputs import render_summary

    base = {"policy": "Timeshift", "energy_j": 3.6e6, "carbon_g": 900.0, "deadline_misses": 0,
            "tasks_with_deadline": 6295, "mean_delay_ms": 0.0, "p95_delay_ms": 0.0, "reference_carbon_g": 1000.0,
            "reduction_pct": 10.0, "forecast": PERFECT_LABEL}
    names = ["1-surfsara_NL-surf_week-Timeshift-run0", "3-surfsara_BE-surf_week-Timeshift-run0"]
    text = render_summary([{**base, "scenario": name} for name in names])
    table = text.split("\n" + names[0] + ":")[0]  # the table, not the counter lines under it
    for name in names:  # on one line, never cut with "…" (the quickstart's were "1-surfsara_NL-surf…")
        assert f"│ {name} │" in table, table
    assert "…" not in table
    assert "perfect foresight:" in table and "(it can lose)" in table  # the forecast label folds onto lines, whole


@pytest.mark.parametrize(("spec", "field"), [
    # a string multiplier was "could not convert string to float: 'x'", naming nothing
    ({"weighers": [{"type": "Ram", "multiplier": "x"}]}, "weighers[0].multiplier"),
    ({"weighers": [{"type": "Ram", "multiplier": True}]}, "weighers[0].multiplier"),  # was 1.0
    ({"weighers": [{"type": "VCpu", "allocationRatio": "2"}]}, "weighers[0].allocationRatio"),
    ({"filters": [{"type": "Ram", "allocationRatio": "1.5"}]}, "filters[0].allocationRatio"),
    ({"filters": [{"type": "InstanceCount", "limit": 2.5}]}, "filters[0].limit"),
    ({"filters": [{"type": "InstanceCount", "limit": "3"}]}, "filters[0].limit"),
])
def test_filter_and_weigher_numbers_are_checked_naming_the_field(spec: dict, field: str) -> None:
    with pytest.raises(SpecError, match=r"allocationPolicies\[0\]\." + field.replace("[", r"\[").replace("]", r"\]")):
        make_policy({"type": "filter", **spec})
    assert make_policy({"type": "filter", "weighers": [{"type": "Ram", "multiplier": -2}],
                        "filters": [{"type": "InstanceCount", "limit": 3}]}).weighers[0].multiplier == -2.0
