"""Vendor/family event mapping, PMU-fitting groups, the probe (really run on this VM), fingerprint."""

import os

import pytest

from perfci_agent import events as ev
from perfci_agent import fingerprint
from perfci_agent.backends import select
from perfci_agent.cpuinfo import CpuId, parse_cpuinfo
from perfci_agent.errors import BackendUnavailable


def cpu(vendor, family, model, arm_part=None):
    return CpuId(vendor, family, model, 1, "", None, frozenset(), arm_part)


def test_store_forward_event_per_vendor():
    assert ev.mapping_for(cpu("GenuineIntel", 6, 0x55)).events["sf_blocks"] == "ld_blocks.store_forward"  # Skylake-SP
    assert ev.mapping_for(cpu("GenuineIntel", 6, 0x3F)).events["sf_blocks"] is None  # Haswell-EP: older meaning
    assert ev.mapping_for(cpu("AuthenticAMD", 0x19, 0x01)).events["sf_blocks"] == "ls_bad_status2.stli_other"  # Zen 3
    assert ev.mapping_for(cpu("AuthenticAMD", 0x19, 0x11)).events["sf_blocks"] == "ls_bad_status2.stli_other"  # Zen 4
    assert ev.mapping_for(cpu("AuthenticAMD", 0x1A, 0x02)).events["sf_blocks"] == "ls_bad_status2.stli_other"  # Zen 5
    zen2 = ev.mapping_for(cpu("AuthenticAMD", 0x17, 0x31))
    assert zen2.events["sf_blocks"] is None and "Zen 2" in zen2.notes["sf_blocks"]
    arm = ev.mapping_for(cpu("ARM", None, None, 0xD0C))
    assert arm.events["sf_blocks"] is None and "Neoverse" in arm.notes["sf_blocks"]


def test_split_and_4k_alias_events_per_vendor():
    icx = ev.mapping_for(cpu("GenuineIntel", 6, 0x6A)).events
    assert (icx["split_loads"], icx["split_stores"], icx["alias_4k"]) == (
        "mem_inst_retired.split_loads", "mem_inst_retired.split_stores", "ld_blocks_partial.address_alias")
    haswell = ev.mapping_for(cpu("GenuineIntel", 6, 0x3F))
    assert all(haswell.events[k] is None and "predates Skylake" in haswell.notes[k] for k in ev.HAZARDS)
    zen4, zen3 = ev.mapping_for(cpu("AuthenticAMD", 0x19, 0x11)), ev.mapping_for(cpu("AuthenticAMD", 0x19, 0x01))
    assert zen4.events["split_loads"] == "ls_misal_loads.ma64" and zen3.events["split_loads"] is None
    assert ev.mapping_for(cpu("AuthenticAMD", 0x1A, 0x02)).events["split_loads"] == "ls_misal_loads.ma64"  # Zen 5
    for amd in (zen3, zen4):  # AMD publishes neither: unsupported with the reason, never a stand-in event
        assert amd.events["split_stores"] is None and "cross a cache line" in amd.notes["split_stores"]
        assert amd.events["alias_4k"] is None and "4K-aliasing" in amd.notes["alias_4k"]
    arm = ev.mapping_for(cpu("ARM", None, None, 0xD0C))
    assert all(arm.events[k] is None for k in ev.HAZARDS)


def test_a_cached_probe_from_before_new_events_is_made_again(tmp_path, monkeypatch):
    intel = ev.mapping_for(cpu("GenuineIntel", 6, 0x6A))
    made = []
    monkeypatch.setattr(ev, "probe", lambda mapping, perf, core=None: made.append(1) or ev.Probe(
        ev.perf_version(perf) if perf else None, {k: e for k, e in mapping.events.items() if e}, {}, ev.read_paranoid()))
    old = ev.Mapping({k: e for k, e in intel.events.items() if k not in ("split_loads", "split_stores", "alias_4k")})
    ev.cached_probe(old, tmp_path, "m" * 64)
    assert "alias_4k" in ev.cached_probe(intel, tmp_path, "m" * 64).supported and len(made) == 2
    ev.cached_probe(intel, tmp_path, "m" * 64)
    assert len(made) == 2  # the complete probe is reused


def test_generic_names_cover_the_metrics_raw_keys():
    m = ev.mapping_for(cpu("GenuineIntel", 6, 0x8F))
    assert set(ev.KEYS) == {"cycles", "instructions", "ref_cycles", "cache_references", "cache_misses",
                            "l1d_load_misses", "llc_load_misses", "branch_misses", "sf_blocks", "split_loads",
                            "split_stores", "alias_4k"}
    assert m.events["l1d_load_misses"] == "L1-dcache-load-misses" and m.events["llc_load_misses"] == "LLC-load-misses"


def test_groups_fit_the_pmu():
    intel = ev.mapping_for(cpu("GenuineIntel", 6, 0x55), smt=True)  # 4 programmable + fixed
    keys = list(ev.KEYS)
    groups = ev.groups(keys, intel)
    for g in groups:
        assert sum(1 for k in g if k not in intel.fixed) <= 4
    assert groups[0][:2] == ["cycles", "instructions"]
    assert sorted(k for g in groups for k in g) == sorted(keys)
    spec = ev.event_spec(groups, intel)
    assert spec.startswith("{cycles,instructions,ref-cycles,cache-references,cache-misses,L1-dcache-load-misses,LLC-load-misses}")
    amd = ev.mapping_for(cpu("AuthenticAMD", 0x19, 0x11))
    amd_keys = [k for k in keys if amd.events[k]]
    assert all(len(g) <= 6 for g in ev.groups(amd_keys, amd))


def test_parse_cpuinfo_this_machine_and_arm():
    with open("/proc/cpuinfo") as fh:
        here = parse_cpuinfo(fh.read())
    assert here.vendor in ("AuthenticAMD", "GenuineIntel", "ARM") and here.family is not None
    arm = parse_cpuinfo("processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n\n")
    assert arm.vendor == "ARM" and arm.arm_part == 0xD0C


def test_probe_on_this_machine_reports_the_missing_pmu():
    with open("/proc/cpuinfo") as fh:
        here = parse_cpuinfo(fh.read())
    probe = ev.probe(ev.mapping_for(here))
    if probe.has_pmu:
        assert "instructions" in probe.supported
        return
    assert probe.why_no_pmu() in ("no PMU: perf reports instructions <not supported>", probe.error)
    choice = select("auto", lambda: probe)
    assert choice.backend.value in ("sim", "tsc") and "no PMU" in choice.reason
    with pytest.raises(BackendUnavailable, match="still possible: .*tsc"):
        select("pmu", lambda: probe)


def test_paranoid_message_names_the_setting():
    msg = ev.paranoid_problem(2, euid=1000)
    assert "kernel.perf_event_paranoid is 2" in msg and "<= 0" in msg
    assert ev.paranoid_problem(2, euid=0) is None and ev.paranoid_problem(-1, euid=1000) is None


def test_probe_without_perf_or_with_strict_paranoid_names_the_alternatives(monkeypatch):
    mapping = ev.mapping_for(cpu("GenuineIntel", 6, 0x55))
    monkeypatch.setattr(ev.shutil, "which", lambda name: None)
    missing = ev.probe(mapping)
    assert not missing.has_pmu and "perf is not installed" in missing.why_no_pmu()
    with pytest.raises(BackendUnavailable, match="perf is not installed.*still possible"):
        select("pmu", lambda: missing, valgrind=lambda: None)
    assert select("auto", lambda: missing, valgrind=lambda: None).backend.value == "tsc"


def test_machine_id_is_sha256_of_canonical_json():
    fp = fingerprint.collect(0)
    for key in ("cpu_vendor", "cpu_family", "cpu_model", "cpu_stepping", "cpu_microcode", "cpu_count", "smt",
                "turbo", "governor", "kernel", "dpdk", "compiler", "hugepages_total", "nic"):
        assert key in fp
    mid = fingerprint.machine_id(fp)
    assert len(mid) == 64 and mid == fingerprint.machine_id(dict(reversed(list(fp.items()))))
    assert fingerprint.machine_id({**fp, "cpu_microcode": "0xdead"}) != mid
    assert fp["cpu_count"] == os.cpu_count()


# --- hybrid Intel: the PMU of the measurement core ------------------------------------------

PERF_FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "perf")
ALDER_LAKE = cpu("GenuineIntel", 6, 0x97)


def fake_sysfs(root, **pmus):
    """A sysfs root with /devices/<pmu>/cpus lists, like a hybrid part's (cpu_core="0-15", ...)."""
    for name, cpus in pmus.items():
        (root / "devices" / name).mkdir(parents=True)
        (root / "devices" / name / "cpus").write_text(cpus + "\n")
    return root


def recorded_perf(name):
    """A perf runner that answers every probe with a recorded `perf stat -x,` output."""
    with open(os.path.join(PERF_FIXTURES, name)) as fh:
        text = fh.read()

    class Done:
        returncode, stdout, stderr = 0, "", text

    return lambda *args, **kwargs: Done()


@pytest.fixture
def perf_allowed(monkeypatch):
    monkeypatch.setattr(ev, "read_paranoid", lambda: -1)
    monkeypatch.setattr(ev, "perf_version", lambda perf: "perf version 6.1.76")


def test_cpulists_parse_like_the_kernel_writes_them():
    assert ev.parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert ev.parse_cpulist("") == set()


def test_core_pmu_is_the_one_whose_cpus_hold_the_core(tmp_path):
    sysfs = fake_sysfs(tmp_path, cpu_core="0-15", cpu_atom="16-23")
    assert ev.core_pmu(2, sysfs) == "cpu_core"
    assert ev.core_pmu(17, sysfs) == "cpu_atom"
    assert ev.core_pmu(None, sysfs) == "cpu_core"
    assert ev.core_pmu(2, fake_sysfs(tmp_path / "plain")) is None  # one core PMU: events carry no prefix


@pytest.mark.parametrize(("core", "pmu"), [(2, "cpu_core"), (20, "cpu_atom")])
def test_hybrid_probe_finds_the_pmu_on_the_measurement_cores_pmu(tmp_path, perf_allowed, core, pmu):
    sysfs = fake_sysfs(tmp_path, cpu_core="0-15", cpu_atom="16-23")
    probe = ev.probe(ev.mapping_for(ALDER_LAKE), "perf", recorded_perf("intel-adl-hybrid-csv.txt"), core=core, sysfs=sysfs)
    assert probe.has_pmu, probe
    assert probe.pmu == pmu
    assert {"cycles", "instructions", "branch_misses"} <= set(probe.supported)
    assert probe.unsupported["cache_misses"] == "cache-misses: not reported by perf"
    assert ev.Probe.from_json(probe.to_json()) == probe
    choice = select("auto", lambda: probe)
    assert choice.backend.value == "pmu" and f"counting the {pmu} PMU of the measurement core" in choice.reason


def test_hybrid_counts_are_read_from_the_measurement_cores_pmu(tmp_path, perf_allowed):
    from perfci_agent import perfstat
    from perfci_agent.backends.pmu import PmuBackend

    with open(os.path.join(PERF_FIXTURES, "intel-adl-hybrid-csv.txt")) as fh:
        counts = perfstat.parse(fh.read())
    sysfs = fake_sysfs(tmp_path, cpu_core="0-15", cpu_atom="16-23")
    mapping = ev.mapping_for(ALDER_LAKE)
    for core, cycles, instructions, running in [(3, 6766433, 4688595, 100.0), (16, 256500230, 37487490, 54.0)]:
        probe = ev.probe(mapping, "perf", recorded_perf("intel-adl-hybrid-csv.txt"), core=core, sysfs=sysfs)
        raw, pct = PmuBackend(probe, mapping)._counts_raw(counts)
        assert (raw["pmu.cycles"], raw["pmu.instructions"]) == (cycles, instructions)
        assert pct["pmu.cycles"] == running  # the atom PMU's multiplexing stays visible


def test_without_knowing_the_core_pmu_a_hybrid_machine_still_looks_pmu_less(tmp_path, perf_allowed):
    """What the probe saw before it read sysfs: two rows for `cycles`, so neither (never summed)."""
    probe = ev.probe(ev.mapping_for(ALDER_LAKE), "perf", recorded_perf("intel-adl-hybrid-csv.txt"), core=2, sysfs=fake_sysfs(tmp_path))
    assert probe.pmu is None and not probe.has_pmu


# --- a perf whose messages are not UTF-8 ---------------------------------------------------------------


def test_a_perf_printing_bytes_that_are_not_utf8_is_probed_not_fatal(tmp_path, monkeypatch):
    """A real program in perf's place, whose version line and error messages hold bytes that do not
    decode as UTF-8 (a Latin-1 locale's message, an event name echoed back): the probe reads them with
    replacement and reports the events unknown, instead of the agent exiting at start."""
    perf = tmp_path / "perf"
    perf.write_bytes(b"#!/bin/sh\n"
                     b"if [ \"$1\" = --version ]; then printf 'perf version 6.1 \\351dition\\n'; exit 0; fi\n"
                     b"printf 'event syntax error: \\377\\376 \\351v\\351nement inconnu\\n' >&2\nexit 129\n")
    perf.chmod(0o755)
    monkeypatch.setattr(ev, "read_paranoid", lambda: -1)
    mapping = ev.mapping_for(cpu("GenuineIntel", 6, 0x55))
    probe = ev.probe(mapping, str(perf), core=None, sysfs=tmp_path)
    assert probe.perf == "perf version 6.1 \ufffddition"
    assert not probe.has_pmu and not probe.supported
    wanted = [k for k, e in mapping.events.items() if e]
    assert wanted and all(probe.unsupported[k] == f"{mapping.events[k]}: unknown to this perf/kernel" for k in wanted)
