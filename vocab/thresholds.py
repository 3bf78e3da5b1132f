"""Detector thresholds as typed settings: one section per detector family, every value with the
reason it is what it is and where it comes from (a spec, a datasheet, a field study, validation
seeds, or "provisional" with what it was set against). A site overrides any of them like every
other setting, e.g. AIOPS_DETECTORS__SAG__DROP_DB='{"optic": {"rx_power_dbm": 2.0}}' or
AIOPS_DETECTORS__PEERS__PERSIST_TICKS=3.

`aiops thresholds` prints them all with their sources; tests/unit/test_thresholds.py refuses a
value without a reason and a source.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# What a source says when a value was set by hand against the generator's own clusters. Honest
# about it: these are the values the realism work measures and replaces.
PROVISIONAL = "provisional: set by hand against generated clusters, not from a spec or field data"

# A warning counts as a prediction only when it leaves time to act: draining a node waits for the
# job's next checkpoint, and large training jobs checkpoint every 15-30 minutes (an operational
# figure: Llama 3's and OPT-175B's logbooks report checkpoints at tens of minutes), so a lead under
# 30 minutes is counted as not predicted. The one owner of this rule: the evaluation, the
# predictor's report card, the run report and the demo all read it here (issue 66: two said 30
# minutes, the report 10, and the views disagreed: "2 of 2" vs "3 of 8").
MIN_USEFUL_LEAD_S = 30 * 60.0

# "Busy" and "working": two facts about a GPU, each with one owner here (issue 67: "a GPU is busy"
# had four definitions and two values). Both are read from NVML's utilization.gpu, which DCGM
# exports as DCGM_FI_DEV_GPU_UTIL: "percent of time over the past sample period during which one or
# more kernels was executing on the GPU" (NVML API reference, nvmlUtilization_t), 0 with no process.
GPU_UTIL_FIELD = "DCGM_FI_DEV_GPU_UTIL"
# Busy: a kernel ran in the sample at all, so a process holds the GPU and uses it. A GPU no process
# holds reads 0, so 1 % is the least a job's GPU shows. It decides whether a GPU of a node a job
# holds without GPU indices is the job's (detectors/detect_loop.py: one busy sample under the job
# makes it a member) and which state a GPU's heat and power are compared in, busy or idle
# (detectors/predict/features.py). Source: the NVML definition above (any kernel counts).
BUSY_UTIL_PCT = 1.0
# Working: computing steadily, so its clock, its power and its PCIe link say how it works. A
# training GPU reads 87-100 % and one in a checkpoint, an evaluation gap or a wait 0
# (real-gpu/h200/nvml-1s.csv); half is far from both and from the ramp of a scrape (operational
# choice). It is the default of the two site settings that read it, RuleThresholds.pcie_busy_util_pct
# (a PCIe link below its best is a fault only while the GPU works) and PeerThresholds.busy_util_pct
# (the busy_only peer rules judge only working samples), and decides when a job computes steadily
# enough for its checkpoint dips to be read (act/checkpoints.py). Not BUSY_UTIL_PCT: a GPU spinning
# at 5 % in a data-loading stall is busy (its job's) but says nothing of how fast it computes.
WORKING_UTIL_PCT = 50.0


def sourced(default: Any, why: str, source: str) -> Any:
    """A threshold with its one-line reason and its source (kept in the JSON schema)."""
    return Field(default=default, description=why, json_schema_extra={"source": source})


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def __setstate__(self, state: dict[Any, Any]) -> None:
        """A checkpoint written before a setting was added holds no value for it: its default,
        as a fresh start would have (the detectors' settings travel with their state)."""
        super().__setstate__(state)
        for name, info in type(self).model_fields.items():
            if name not in self.__dict__:
                self.__dict__[name] = info.get_default(call_default_factory=True)


class PeerRule(_Section):
    """One metric of one measurement compared with its cohort (robust z against the median)."""

    metric: str
    cohort: Literal["job", "role", "all"]
    z: float  # alarm beyond this robust z (signed: negative = too low)
    abs_floor: float = 0.0  # the spread never counts as less than this (metric's unit)
    rel_floor: float = 0.0  # ... nor less than this share of the median
    log: bool = False  # compare log10 of the value (rates spanning decades)
    rate: bool = False  # a counter: compare its rate
    # off its peers by less than this (in the metric's unit): an early warning ("warn:<cohort>"),
    # not a failure; e.g. a GPU a few degrees warmer than its job's other GPUs is creeping
    warn_within: float = 0.0
    # judged on each entity's own level (the median of its samples over this many seconds, at
    # least PeerThresholds.window_min_scrapes of them) against its cohort's levels: 0 = one scrape
    window_s: float = 0.0
    # only while the GPU works (DCGM_FI_DEV_GPU_UTIL at least PeerThresholds.busy_util_pct): an
    # idle second (a checkpoint, an eval gap) says nothing of how fast the GPU works
    busy_only: bool = False
    # judged against its own place in the cohort (detectors/stack/place.py): the entity's value
    # relative to its cohort's median at each scrape, its recent place against its earlier one;
    # z is then the drop in standard errors of its own wander, rel_floor the least drop that counts
    history: bool = False
    # only samples with this clock event reason held count (a registry name, "" = any): a chip's
    # place under the power cap is its efficiency; off the cap every GPU runs at its top clock
    held_reason: str = ""
    # ... or only samples where this reason is known and not held ("" = any)
    unheld_reason: str = ""
    why: str
    source: str


class RuleThresholds(_Section):
    """Hard signals: error counters, pause rates, bad states."""

    error_counters: dict[str, dict[str, float]] = sourced(
        {
            "gpu": {
                "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 1,
                "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 1,
                "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": 1,
                "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": 1,
                "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 1,
            },
            "nvswitch": {"nvlink_crc_errors": 1, "nvlink_replay_errors": 1},
            "nic": {"port_rcv_errors": 1, "link_downed": 1, "port_xmit_discards": 1},
            "switch_port": {"port_rcv_errors": 1, "link_downed": 1, "port_xmit_discards": 1},
        },
        "increase per tick of an error counter that is an anomaly (1 = any increase); symbol "
        "errors are judged as a bit error rate instead (link_ber_limit)",
        f"{PROVISIONAL}; a single event, not a rate against an error budget",
    )
    link_ber_limit: float = sourced(
        1e-12,
        "symbol errors per second over the port's line rate (a lower bound on its bit error rate) "
        "above which a link is faulty; a lone symbol error is far inside it",
        "InfiniBand spec BER requirement; NVIDIA ibdiagnet's default BER threshold 10^-12 "
        "(ibdiagnet user manual, 'Bit Error Rate'): 0.4 errors/s at 400 Gb/s",
    )
    link_rate_gbps: dict[str, float] = sourced(
        {"nic": 400.0, "switch_port": 400.0},
        "line rate the bit error rate is judged at, per measurement (a site sets its own)",
        "NDR InfiniBand and 400GbE: 4 lanes x 100 Gb/s (site setting; HDR would be 200)",
    )
    pause_rate_per_s: dict[str, dict[str, float]] = sourced(
        {
            "nic": {"tx_prio3_pause": 5960.0, "rx_prio3_pause": 5960.0},
            "switch_port": {"tx_prio3_pause": 5960.0, "rx_prio3_pause": 5960.0},
        },
        "PFC pause frames per second, averaged over a whole scrape interval, that keep the port "
        "paused at least half of the time: a storm, not an incast burst",
        "IEEE 802.1Qbb: a pause lasts at most 65,535 quanta of 512 bit times = 83.9 us at 400 Gb/s, "
        "so 0.5 / 83.9 us = 5,960 frames/s hold a port paused half the time (a scrape interval is "
        "far longer than the 100 ms a PFC watchdog calls a storm, Guo et al., SIGCOMM'16)",
    )
    throttle_reasons: tuple[str, ...] = sourced(
        ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"),
        "clock-event reasons (registry names) that mark a GPU throttled by hardware: a fault on the first scrape",
        "NVML clock event reasons (nvml.h): HW slowdown, HW thermal and power brake are the "
        "hardware's emergency brakes; idle, application clocks and sync boost are not faults",
    )
    sustained_throttle_reasons: tuple[str, ...] = sourced(
        ("sw_thermal_slowdown",),
        "clock-event reasons that are a fault only when they last (sustained_ticks scrapes in a "
        "row): the driver's own regulation, which busy GPUs brush now and then",
        "NVML: SW thermal slowdown is the driver lowering clocks as the GPU nears its slowdown "
        "temperature, normal regulation while brief (Llama 3 §3.3.4: temperature-driven throughput "
        "swings of 1-2 % in a healthy fleet)",
    )
    sustained_ticks: int = sourced(
        2,
        "scrapes in a row a sustained reason must show before it is a fault",
        "operational choice: one scrape is a blip, two in a row is a state",
    )
    application_xid_jobs: int = sourced(
        3,
        "an application XID (NVIDIA's class) belongs to the job; the same GPU raising application "
        "XIDs under this many different jobs within application_xid_window_s is a suspect",
        "NVIDIA XID catalog: XIDs 13, 31, 43, 45 are most often the user's code; one GPU that "
        "fails different users' jobs points to the GPU. Three, from the field's base rate: Delta "
        "measured Xid 31 at 8.3e-4 per GPU-hour (Cui et al. 2025 §4), and the other application "
        "XIDs add to it; at r per busy GPU-hour a healthy GPU sees k within a day with probability "
        "about (24r)^k/k!. At Delta's rate two are 2e-4 a GPU-day (0.2 false suspects per 1,000 "
        "GPU-days), at 2.5 times it (2e-3, allowing for the other codes) 1.2 per 1,000, more than "
        "the whole false-incident budget of 0.5; three stay under 0.02 per 1,000 at either",
    )
    application_xid_window_s: float = sourced(
        86_400.0,
        "how long an application XID counts toward naming its GPU a suspect",
        "operational choice: a day, so the base-rate arithmetic of application_xid_jobs holds "
        "(without a window a healthy GPU in a daemon that runs for months gathers three in the "
        "end: 0.048 a day is three in about two months)",
    )
    pcie_busy_util_pct: float = sourced(
        WORKING_UTIL_PCT,
        "a GPU's PCIe link below its maximum generation or width is a fault only while the GPU is "
        "this busy (DCGM_FI_DEV_GPU_UTIL), for sustained_ticks scrapes in a row",
        "nvidia-smi(1), 'PCI > GPU Link Info': the current link generation and width 'may be "
        "reduced when the GPU is not in use' (dynamic link speed, ASPM); under load the link runs "
        "at its maximum unless it trained low. Half busy is far from idle and from the ramp of a scrape",
    )
    nvlink_links_by_model: dict[str, int] = sourced(
        {"H100": 18, "H200": 18, "H800": 8, "A100": 12, "A800": 8, "B200": 18, "GB200": 18},
        "NVLink links a GPU of each model has; fewer in the Up state is a fault",
        "NVIDIA datasheets: H100/H200 SXM 18 NVLink 4 links (900 GB/s), B200/GB200 18 NVLink 5 "
        "links (1.8 TB/s), A100 SXM 12 NVLink 3 links (600 GB/s); H800 and A800 (export parts) 8 "
        "links (400 GB/s)",
    )
    gpu_model: str = sourced(
        "H100",
        "the fleet's GPU model, a key of nvlink_links_by_model (a site sets its own)",
        "site setting",
    )
    fabric_manager_bad: tuple[int, ...] = sourced(
        (1, 4),
        "DCGM_FI_DEV_FABRIC_MANAGER_STATUS values that mean the GPU cannot use its NVSwitch fabric",
        "dcgmFabricManagerStatus_t (dcgm_structs.h): 1 not started, 4 failure; 0 (not supported: "
        "PCIe or NVLink-bridge GPUs), 2 (in progress, while the node boots) and 3 (success) are not faults",
    )
    link_recovery_repeat: tuple[int, float] = sourced(
        (3, 3600.0),
        "(count, seconds): link_error_recovery increments this often on one port is a link that "
        "retrains without going down; a lone recovery is not",
        "InfiniBand Architecture Spec vol. 1, PortCounters LinkErrorRecoveryCounter: each count is "
        "a successful retrain after a link error, which should not happen on a healthy link; "
        "ibdiagnet reports any increase. No field study gives the rate of lone retrains on healthy "
        "links, so three within the hour is an operational choice, on this arithmetic: with lone "
        "retrains at r per port-hour, two within an hour happen about r^2 per port-hour, three "
        "r^3/2; were r 3e-3 (one a port every two weeks) two would be 0.2 false links per 1,000 "
        "port-days (a port per GPU: half the whole budget), three 3e-4. A link that truly retrains "
        "also corrupts symbols: the receive-error and BER rules name it first, so waiting for a "
        "third costs no recall",
    )
    state_repeat_s: float = sourced(
        300.0,
        "a bad state that lasts is reported again this often, so a fresh listener learns it",
        "operational choice: five minutes, well inside the incident engine's 15-minute quiet period",
    )


class PresenceThresholds(_Section):
    """Entities that should report and do not; counters unseen for a while."""

    silent_after_ticks: int = sourced(
        2,
        "missing this many ticks in a row while it should report (a GPU of a running job, a switch)",
        "operational choice: one lost scrape is common, two in a row is a silent entity",
    )
    max_gap_ticks: int = sourced(
        5,
        "a counter unseen for longer starts a new baseline instead of a rate over the gap",
        "operational choice: an exporter restart resets counters; a long gap's rate means nothing",
    )


# the window a GPU's own level is the median of before it is compared with its job's: minutes, so
# the wander of a power-capped clock (recording, phase train) averages out and a lone step-boundary
# sample is outvoted, while a fault is still seen well inside the 600 s a detection is allowed
# (docs/detection.md: the median turns after half the window)
WINDOW_S = 180.0


class PeerThresholds(_Section):
    """A measurement's entities against their cohort (job, switch role, all)."""

    rules: dict[str, tuple[PeerRule, ...]] = sourced(
        {
            "gpu": (
                PeerRule(
                    metric="DCGM_FI_DEV_SM_CLOCK",
                    cohort="job",
                    z=-4.0,
                    rel_floor=0.04,
                    window_s=WINDOW_S,
                    busy_only=True,
                    why="a GPU whose clock stays well below its job's others over minutes slows the whole "
                    "synchronous job; one scrape of a power-capped clock says nothing (it wanders +-8 %)",
                    source="real-gpu/h200/nvml-1s.csv, phase train: under the SW power cap (reason 0x4) the "
                    "SM clock wanders 1605-1920 MHz from one second to the next (4 % sd), so one scrape "
                    "is judged never, a 3-minute median is; Sinha et al., "
                    "'Not All GPUs Are Created Equal' (SC'22): identical GPUs under one cap differ by a "
                    "few percent (8 %, p5-p95; with the power factor the slowest healthy chips sit ~10 % "
                    "under their job), and a median of 8 scrapes still wanders 1.7 % (1.25 x 3.8 % / "
                    "sqrt 8), so the spread never counts as less than 4 % and a straggler against its "
                    "job is 4 of those (16 %: the slowest healthy chip + 3.5 x 1.7 %) below its job's "
                    "median, beyond the cohort's own spread (its MAD); a milder fail-slow is found "
                    "against its own place (the history rule below)",
                ),
                PeerRule(
                    metric="DCGM_FI_DEV_SM_CLOCK",
                    cohort="job",
                    z=-4.0,
                    rel_floor=0.0076,
                    window_s=WINDOW_S,
                    busy_only=True,
                    unheld_reason="sw_power_cap",
                    why="off the power cap (memory-bound work) a working GPU runs at its top clock: one "
                    "that stays below its job's others there is slower, with no cap to explain it",
                    source="real-gpu/h200/nvml-1s.csv, phases membound, cooldown and eval gap: off the cap "
                    "every sample reads the top clock (1980 MHz), no wander and no chip spread; so the "
                    "spread never counts as less than one clock step (15 MHz, 0.76 %) and a straggler is "
                    "4 of those (3 %) below its job's median over the 3-minute window",
                ),
                PeerRule(
                    metric="DCGM_FI_DEV_SM_CLOCK",
                    cohort="job",
                    z=-6.0,
                    rel_floor=0.03,
                    busy_only=True,
                    history=True,
                    held_reason="sw_power_cap",
                    why="a GPU whose clock falls from its own place in its job's spread is slower than it "
                    "was (fail-slow), though still inside the spread of healthy chips",
                    source="detectors/stack/place.py: under the SW power cap (reason 0x4, "
                    "real-gpu/h200/nvml-1s.csv phase train) a chip's place is its efficiency and stays, "
                    "its wander (3.8 % sd) has no memory; z -6: one false judgement in ~1e9 independent "
                    "ones (normal tail); a GPU is judged every scrape on three windows, ~3e6 "
                    "judgements a day on 10,000 GPUs at 60-s scrapes, and clock steps and an estimated "
                    "wander make the tail heavier than normal (z -5 gave one false fall in 340 "
                    "GPU-days at harsh realism, validation seed 4502); the least drop 3 % (operational "
                    "choice: less is within the chip-to-chip spread's own uncertainty, Sinha et al., SC'22)",
                ),
                PeerRule(
                    metric="DCGM_FI_DEV_POWER_USAGE",
                    cohort="job",
                    z=-4.0,
                    abs_floor=15.0,
                    rel_floor=0.04,
                    window_s=WINDOW_S,
                    busy_only=True,
                    why="a busy GPU drawing much less power than its job's others over minutes is doing "
                    "less work; a one-second sample at a step boundary is not",
                    source="real-gpu/h200/nvml-1s.csv, phase train: busy GPUs sit at their cap (675-702 W "
                    "of 700, reason 0x4) but a one-second sample now and then catches a step boundary "
                    "(279 W at 100 % utilisation) and a checkpoint drops to 127 W at 0 %; judged on a "
                    "3-minute median of busy samples only; floor 4 % of the median: chips off the cap "
                    "differ by a few percent in power for the same work (Sinha et al., SC'22; the "
                    "recording's membound phase holds 556-593 W)",
                ),
                PeerRule(
                    metric="DCGM_FI_DEV_GPU_TEMP",
                    cohort="job",
                    z=6.0,
                    abs_floor=1.5,
                    warn_within=18.0,
                    why="hotter than its job's GPUs under the same load; within 18 °C an early warning",
                    source=PROVISIONAL,
                ),
            ),
            "switch": (
                PeerRule(
                    metric="port_xmit_wait",
                    cohort="role",
                    z=8.0,
                    abs_floor=0.15,
                    log=True,
                    rate=True,
                    why="a switch waiting for credit far more than its role's others is congested",
                    source=PROVISIONAL,
                ),
            ),
            "node": (
                PeerRule(
                    metric="inlet_temp_c",
                    cohort="all",
                    z=8.0,
                    abs_floor=0.5,
                    why="a node's inlet far warmer than the hall's others points at its rack's cooling",
                    source=PROVISIONAL,
                ),
            ),
            # not the return temperature: it follows the rack's load, which jobs set
            "cooling": (
                PeerRule(
                    metric="supply_temp_c",
                    cohort="all",
                    z=8.0,
                    abs_floor=0.5,
                    why="a cooling loop supplying warmer coolant than the others is failing",
                    source=PROVISIONAL,
                ),
            ),
        },
        "peer comparisons per measurement; each rule carries its own reason and source",
        "see each rule",
    )
    persist_ticks: int = sourced(
        2,
        "a peer deviation must hold this many ticks in a row (one-scrape blips are not faults)",
        PROVISIONAL,
    )
    busy_util_pct: float = sourced(
        WORKING_UTIL_PCT,
        "a GPU counts as working for the busy_only rules at this DCGM_FI_DEV_GPU_UTIL or more",
        "NVML utilization.gpu: percent of the sample period a kernel ran; real-gpu/h200/nvml-1s.csv "
        "reads 87-100 % while training, 0 % in its checkpoints and eval gap (operational choice: half)",
    )
    busy_tensor_active: float = sourced(
        0.05,
        "where DCGM_FI_PROF_PIPE_TENSOR_ACTIVE is exported, a GPU counts as working for the busy_only "
        "rules only with at least this tensor-pipe activity: one spinning in a collective that waits "
        "for a stalled peer shows 100 % utilisation, no tensor work and a fraction of its power",
        "DCGM field guide: PIPE_TENSOR_ACTIVE is the ratio of cycles the tensor pipes are active "
        "(0 while a kernel only waits); NVML utilization.gpu counts any kernel running, a NCCL wait "
        "kernel included. Operational choice: 5 %, a twentieth of the cycles, far under what a "
        "compute step keeps busy (tenths) and clear of a sampled ratio's jitter around 0 during a "
        "wait (at 1 %, waits that read 0.01-0.02 passed as work: a GPU of a job stalled every other "
        "minute by a flapping link took its 528 W waits for its level and was named a straggler)",
    )
    window_min_scrapes: int = sourced(
        8,
        "a windowed rule's window never holds fewer scrapes than this (at 60 s, 8 minutes)",
        "real-gpu/h200/nvml-1s.csv, phase train: about one second in 25 is a step or checkpoint "
        "boundary (185-279 W at 87-100 % utilisation), and a node's GPUs catch it together; at harsh "
        "realism two such scrapes in a row on one node come dozens of times a day on 128 nodes, and "
        "with a job's pace changing at the same time a median of 5 turned; a median of 8 needs 4 "
        "(operational choice; the median still turns within 5 minutes at 60-s scrapes)",
    )
    node_mates: int = sourced(
        3,
        "a GPU judged against its job (rules of cohort job, not history) is also judged against its "
        "node's other GPUs in the same job when it has at least this many: it must stand out from "
        "them too (node_mates_share of the rule's z); a node whose GPUs all shift together is the "
        "host's doing, judged by the node's own signals",
        "a node's GPUs share its host, its power supply and its air or coolant: a host in another "
        "phase of the job than the others (its input pipeline, an evaluation or a checkpoint), a PSU or a hot inlet "
        "moves all of them (the PSU and cooling rules name those); a fail-slow GPU is one chip "
        "(Wu et al., ATC'24 FALCON; Sinha et al., SC'22). Three mates make a median one outlier "
        "cannot carry (operational choice); a false GPU straggler at harsh realism, validation seed "
        "4505 (10,000 GPUs, 60-s scrapes): a whole node 20 % under its job's power while its host "
        "ran another phase",
    )
    node_mates_share: float = sourced(
        0.5,
        "how far (a share of the rule's z) a GPU must stand out from its node mates' median",
        "the mates' median sits anywhere in the job's chip spread: a GPU past the job's bar stands at "
        "least half of it below mates in the low half of that spread (operational choice)",
    )
    history_recent_scrapes: int = sourced(
        30,
        "a GPU's recent place in its job (history rules) is the trimmed mean of this many of its samples",
        "the test's power is in its samples: the place's wander under the cap is 3.8 % sd a sample "
        "(real-gpu/h200/nvml-1s.csv, phase train, independent at lags of 10 s and more), so 30 recent "
        "and 60 earlier samples give a standard error of ~1 % and a 5 % slowdown (the mildest fail-slow "
        "that matters: Sinha et al., SC'22 measure 8 % between healthy GPUs) stands 5 of them out; at "
        "60-s scrapes that is 30 minutes, inside the shortest straggler episodes FALCON reports "
        "(Wu et al., ATC'24: fail-slows last tens of minutes to hours)",
    )
    history_baseline_scrapes: int = sourced(
        60,
        "a GPU's earlier place in its job is the median of up to this many samples before the recent ones",
        "twice the recent samples: the baseline's error then adds a third to the recent one's "
        "(operational choice; see history_recent_scrapes)",
    )
    history_regime: float = sourced(
        0.05,
        "a GPU's recent place is compared only with earlier places taken while about the same share "
        "(within this) of its job's working GPUs held the power cap",
        "when a job's pace changes (a slow member makes the others wait, their demand falls) the chips "
        "with the least dynamic power leave the cap first (a chip's power is static plus dynamic "
        "power scaled by its load), which changes whose median the places are taken against; a pace "
        "change with every chip still at the cap moves all clocks by one factor and no place; one "
        "GPU of 20 (operational choice; of an 8-GPU job, any change)",
    )
    history_regime_level: float = sourced(
        0.05,
        "... and while its job's median clock was within this share of its recent level",
        "a chip whose place would take it past the top clock is held there (1980 MHz, "
        "real-gpu/h200: off the cap every sample reads it), so its place shrinks when its job's "
        "median rises and grows back when it falls; a straggler moves its job's median by at most "
        "4 % before the bar against the job (16 %) finds it (the others' demand falls by 0.65 x "
        "its slowdown, their clock rises by the cube root of that), so 5 % (operational choice)",
    )
    history_hold_z: float = sourced(
        -3.0,
        "while a GPU's fall from its place stands this many standard errors, its older samples stay "
        "out of its baseline",
        "a fall still being established (or a fault that lasts) is not learned as the GPU's new place; "
        "a healthy GPU there briefly only keeps its baseline a little longer (operational choice)",
    )
    history_baseline_min: int = sourced(
        20,
        "no history judgement before the baseline holds this many samples (a GPU new to its job)",
        "with fewer, its own wander (the baseline's MAD) is not known well enough to set the bar (operational choice)",
    )


class DriftThresholds(_Section):
    """Slow physical signals against their own history (sudden changes; slow creeps are the
    failure predictor's)."""

    metrics: dict[str, tuple[str, ...]] = sourced(
        {"optic": ("rx_power_dbm",), "cooling": ("supply_temp_c",)},
        "the slow physical signals watched against their own history",
        "steady signals by physics: optical power and coolant temperature move slowly when healthy",
    )
    threshold: float = sourced(
        0.9,
        "univariate score R/(1+R) above which a drift fires: a deviation nine times the series' record",
        PROVISIONAL,
    )


class SagThresholds(_Section):
    """Sagging levels against each series' own slow reference: an optic's receive power falling
    is the classic sign of a dirty or failing transceiver. An early warning ("warn:sag")."""

    drop_db: dict[str, dict[str, float]] = sourced(
        {"optic": {"rx_power_dbm": 1.5}},
        "dB below the series' own slow reference that is a sag",
        PROVISIONAL,
    )
    tau_s: float = sourced(
        6 * 3600.0,
        "time constant of the slow reference: slower than any sag worth warning about",
        PROVISIONAL,
    )
    repeat_s: float = sourced(3600.0, "a sag that lasts is warned about again this often", PROVISIONAL)
    dark_dbm: float = sourced(
        -20.0,
        "no light at all: the link is down (the link rules report it), not a sag",
        "below the receiver sensitivity of 400G optics (about -10 dBm per lane, IEEE 802.3 / "
        "transceiver datasheets): nothing is received",
    )


class DetectorSettings(_Section):
    rules: RuleThresholds = RuleThresholds()
    presence: PresenceThresholds = PresenceThresholds()
    peers: PeerThresholds = PeerThresholds()
    drift: DriftThresholds = DriftThresholds()
    sag: SagThresholds = SagThresholds()


def describe(settings: BaseModel, prefix: str = "") -> list[tuple[str, Any, str, str]]:
    """(name, value, reason, source) for every threshold, peer rules one by one."""
    out: list[tuple[str, Any, str, str]] = []
    for name, info in type(settings).model_fields.items():
        value = getattr(settings, name)
        path = f"{prefix}{name}"
        if isinstance(value, BaseModel):
            out += describe(value, f"{path}.")
            continue
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        if name == "rules" and isinstance(value, dict) and all(isinstance(v, tuple) for v in value.values()):
            for measurement, rules in value.items():
                for rule in rules:
                    shown = rule.model_dump(exclude={"why", "source", "metric", "cohort"}, exclude_defaults=True)
                    out.append((f"{path}.{measurement}.{rule.metric}@{rule.cohort}", shown, rule.why, rule.source))
            continue
        out.append((path, value, info.description or "", str(extra.get("source", ""))))
    return out


__all__ = [
    "BUSY_UTIL_PCT",
    "GPU_UTIL_FIELD",
    "MIN_USEFUL_LEAD_S",
    "PROVISIONAL",
    "WORKING_UTIL_PCT",
    "DetectorSettings",
    "DriftThresholds",
    "PeerRule",
    "PeerThresholds",
    "PresenceThresholds",
    "RuleThresholds",
    "SagThresholds",
    "describe",
    "sourced",
]
