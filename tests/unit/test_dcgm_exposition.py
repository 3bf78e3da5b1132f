"""The dcgm-exporter stand-in (tests/collectors/dcgm_exporter.py): what it renders, checked with a
strict Prometheus text-format parser (prometheus_client is not installed in this venv), and how its
HTTP server behaves."""

from __future__ import annotations

import http.client
import re
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.collectors.dcgm_exporter import (
    FP64_BLANK,
    INT32_BLANK,
    INT64_BLANK,
    INT64_NOT_SUPPORTED,
    Counter,
    ExporterServer,
    Flavor,
    Gpu,
    go_format_float,
    make_gpus,
    read_counters,
    render,
)

ROOT = Path(__file__).resolve().parents[2]
STOCK = ROOT / "tests" / "data" / "dcgm-exporter" / "default-counters.csv"
OURS = ROOT / "config" / "dcgm-exporter" / "counters.csv"
NODE = "gpu-node-017"
DRIVER = "550.54.15"
BASE_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]

# ---------------------------------------------------------------------------------------------
# A strict parser for the Prometheus text format (version 0.0.4)

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_VALUE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|NaN|[+-]Inf")
_TYPES = {"counter", "gauge", "untyped", "summary", "histogram"}


@dataclass
class Family:
    help: str | None = None
    type: str | None = None
    samples: list[tuple[list[tuple[str, str]], float, str]] = field(default_factory=list)  # labels, value, text


def _parse_labels(text: str, pos: int, line_no: int) -> tuple[list[tuple[str, str]], int]:
    labels: list[tuple[str, str]] = []
    if text[pos] == "}":
        return labels, pos + 1
    while True:
        m = _LABEL.match(text, pos)
        if not m:
            raise ValueError(f"line {line_no}: bad label name at {text[pos:]!r}")
        name, pos = m.group(), m.end()
        if text[pos : pos + 2] != '="':
            raise ValueError(f'line {line_no}: expected =" after {name}')
        pos += 2
        value = []
        while True:
            if pos >= len(text):
                raise ValueError(f"line {line_no}: unterminated label value")
            ch = text[pos]
            if ch == "\\":
                esc = text[pos + 1 : pos + 2]
                if esc not in ("\\", '"', "n"):
                    raise ValueError(f"line {line_no}: bad escape \\{esc}")
                value.append("\n" if esc == "n" else esc)
                pos += 2
            elif ch == '"':
                pos += 1
                break
            elif ch == "\n":
                raise ValueError(f"line {line_no}: newline in label value")
            else:
                value.append(ch)
                pos += 1
        if name in (n for n, _ in labels):
            raise ValueError(f"line {line_no}: duplicate label {name}")
        labels.append((name, "".join(value)))
        if text[pos] == "}":
            return labels, pos + 1
        if text[pos] != ",":
            raise ValueError(f"line {line_no}: expected , or }} at {text[pos:]!r}")
        pos += 1


def parse_exposition(text: str) -> dict[str, Family]:
    """Families by name, in order of appearance; raises ValueError on anything not well-formed."""
    if text and not text.endswith("\n"):
        raise ValueError("exposition must end with a newline")
    families: dict[str, Family] = {}
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    current: str | None = None
    for line_no, line in enumerate(text.split("\n")[:-1], start=1):
        if not line:
            raise ValueError(f"line {line_no}: empty line")
        if line.startswith("#"):
            m = re.fullmatch(r"# (HELP|TYPE) (\S+) (.*)", line) or re.fullmatch(r"# (HELP) (\S+) ?()", line)
            if not m or not _NAME.fullmatch(m.group(2)):
                raise ValueError(f"line {line_no}: bad comment {line!r}")
            kind, name, rest = m.groups()
            fam = families.setdefault(name, Family())
            if fam.samples:
                raise ValueError(f"line {line_no}: {kind} for {name} after its samples")
            if kind == "HELP":
                if fam.help is not None:
                    raise ValueError(f"line {line_no}: second HELP for {name}")
                fam.help = rest
            else:
                if fam.type is not None or rest not in _TYPES:
                    raise ValueError(f"line {line_no}: bad or second TYPE for {name}: {rest!r}")
                fam.type = rest
            current = name
            continue
        m = _NAME.match(line)
        if not m:
            raise ValueError(f"line {line_no}: bad metric name in {line!r}")
        name, pos = m.group(), m.end()
        labels: list[tuple[str, str]] = []
        if line[pos : pos + 1] == "{":
            labels, pos = _parse_labels(line, pos + 1, line_no)
        if line[pos : pos + 1] != " ":
            raise ValueError(f"line {line_no}: expected a space before the value")
        value_text = line[pos + 1 :]
        if not _VALUE.fullmatch(value_text):
            raise ValueError(f"line {line_no}: bad value {value_text!r}")
        if name != current and name in families and families[name].samples:
            raise ValueError(f"line {line_no}: samples of {name} are not contiguous")
        fam = families.setdefault(name, Family())
        if fam.type is None:
            raise ValueError(f"line {line_no}: sample of {name} before its TYPE")
        key = (name, tuple(sorted(labels)))
        if key in seen:
            raise ValueError(f"line {line_no}: duplicate series {key}")
        seen.add(key)
        fam.samples.append((labels, float(value_text.replace("Inf", "inf")), value_text))
        current = name
    return families


def test_parser_rejects_what_it_should() -> None:
    good = '# HELP X h\n# TYPE X gauge\nX{a="1"} 2\n'
    assert parse_exposition(good)["X"].samples[0][1] == 2.0
    for bad in (
        'X{a="1"} 2\n',  # no TYPE
        '# TYPE X gauge\nX{a="1"} 2',  # no final newline
        '# TYPE X gauge\nX{a="1"} 1_0\n',  # not a Go float
        '# TYPE X gauge\nX{a="1",a="2"} 1\n',  # duplicate label
        '# TYPE X gauge\nX{a="1"} 1\nX{a="1"} 2\n',  # duplicate series
        '# TYPE X gauge\n# TYPE Y gauge\nX{a="1"} 1\nY 1\nX{a="2"} 1\n',  # split family
        '# TYPE X gauge\nX{a="1} 1\n',  # unterminated
        "# TYPE X gauge\n\nX 1\n",  # empty line
        '# TYPE X gauge\nX{a="\\t"} 1\n',  # bad escape
    ):
        with pytest.raises(ValueError):  # noqa: PT011 (one message per case)
            parse_exposition(bad)


# ---------------------------------------------------------------------------------------------
# the counters file


def test_stock_counters_file_is_the_upstream_release_file() -> None:
    first = STOCK.read_text().splitlines()[0]
    assert "83970c75fe78560f70145cf7bd647b8f0c1d3655" in first
    counters = read_counters(STOCK)
    assert len(counters) == 26
    assert [c for c in counters if c.kind == "label"] == [Counter("DCGM_FI_DRIVER_VERSION", "label", "Driver Version")]
    by_field = {c.field: c for c in counters}
    assert by_field["DCGM_FI_DEV_DEC_UTIL"] == Counter("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).")
    assert by_field["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].kind == "counter"
    assert by_field["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"].kind == "counter"
    # the DCP section releases ship, and none of the commented-out rows
    assert {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE"} <= set(
        by_field
    )
    assert not {"DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"} & set(
        by_field
    )


def test_read_counters_handles_the_format_quirks(tmp_path: Path) -> None:
    path = tmp_path / "c.csv"
    path.write_text(
        "# Format,,\n# If line starts with a '#' it is considered a comment,,\n\n# Clocks,,\n"
        "DCGM_FI_DEV_SM_CLOCK,  gauge, SM clock frequency (in MHz).\n"
        "DCGM_FI_DEV_DEC_UTIL ,     gauge,   Decoder utilization (in %).\n"
        "# DCGM_FI_DEV_POWER_VIOLATION,       counter, Throttling duration.\n"
        "\n"
        "DCGM_FI_DRIVER_VERSION,        label, Driver Version\n"
    )
    assert read_counters(path) == [
        Counter("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
        Counter("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
        Counter("DCGM_FI_DRIVER_VERSION", "label", "Driver Version"),
    ]


@pytest.mark.parametrize(
    "row",
    [
        "DCGM_FI_DEV_SM_CLOCK, gauge",  # two fields
        "DCGM_FI_DEV_SM_CLOCK, gauge, SM clock, in MHz",  # a comma in the help: four fields
        "DCGM_FI_DEV_SM_CLOCK, gaug, SM clock",  # not a Prometheus type
    ],
)
def test_read_counters_refuses_what_the_exporter_refuses(tmp_path: Path, row: str) -> None:
    path = tmp_path / "c.csv"
    path.write_text(f"# ok\n{row}\n")
    with pytest.raises(ValueError, match=r"c\.csv:2"):
        read_counters(path)


# ---------------------------------------------------------------------------------------------
# the exposition


@pytest.mark.parametrize("csv_path", [STOCK, OURS], ids=["stock", "ours"])
@pytest.mark.parametrize("flavor", ["template", "expfmt"])
def test_every_counter_once_per_gpu(csv_path: Path, flavor: Flavor) -> None:
    counters = read_counters(csv_path)
    gpus = make_gpus(NODE, 8)
    families = parse_exposition(render(NODE, gpus, counters, DRIVER, flavor=flavor))
    metrics = [c for c in counters if c.kind != "label"]
    assert set(families) == {c.field for c in metrics}
    for c in metrics:
        fam = families[c.field]
        assert (fam.type, fam.help) == (c.kind, c.help)
        assert sorted(dict(labels)["gpu"] for labels, _, _ in fam.samples) == [str(i) for i in range(8)]
        uuids = {dict(labels)["UUID"] for labels, _, _ in fam.samples}
        assert uuids == {g.uuid for g in gpus}


def test_labels_names_order_and_values() -> None:
    gpus = make_gpus(NODE, 8)
    families = parse_exposition(render(NODE, gpus, read_counters(STOCK), DRIVER))
    for name, fam in families.items():
        for labels, _, _ in fam.samples:
            extra = ["err_code", "err_msg"] if name == "DCGM_FI_DEV_XID_ERRORS" else []
            assert [k for k, _ in labels] == BASE_LABELS + extra
            d = dict(labels)
            gpu = gpus[int(d["gpu"])]
            assert d == {
                "gpu": str(gpu.index),
                "UUID": gpu.uuid,
                "pci_bus_id": gpu.pci_bus_id,
                "device": f"nvidia{gpu.index}",
                "modelName": "NVIDIA H100 80GB HBM3",
                "Hostname": NODE,
                "DCGM_FI_DRIVER_VERSION": DRIVER,
                **({"err_code": "0", "err_msg": "No Error"} if extra else {}),
            }
    assert re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", gpus[0].uuid)
    assert [g.pci_bus_id for g in gpus[:2]] == ["00000000:18:00.0", "00000000:2A:00.0"]


def test_label_rows_become_labels_sorted_by_name_not_metrics() -> None:
    counters = [
        Counter("DCGM_FI_DRIVER_VERSION", "label", "Driver Version"),
        Counter("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
        Counter("DCGM_FI_DEV_SERIAL", "label", "Device Serial Number"),
    ]
    families = parse_exposition(render(NODE, make_gpus(NODE, 2), counters, DRIVER))
    assert list(families) == ["DCGM_FI_DEV_GPU_TEMP"]
    for labels, _, _ in families["DCGM_FI_DEV_GPU_TEMP"].samples:
        names = [k for k, _ in labels]
        assert names[6:] == ["DCGM_FI_DEV_SERIAL", "DCGM_FI_DRIVER_VERSION"]
        assert re.fullmatch(r"\d{13}", dict(labels)["DCGM_FI_DEV_SERIAL"])
    # only label rows: nothing to serve at all
    assert render(NODE, make_gpus(NODE, 2), [counters[0]], DRIVER) == ""


def test_exact_lines_for_one_gpu() -> None:
    gpu = Gpu(
        index=0,
        uuid="GPU-6d5c0ac5-74d7-3130-46f1-e93ed57f469a",
        pci_bus_id="00000000:18:00.0",
        values={
            "DCGM_FI_DEV_SM_CLOCK": 1980,
            "DCGM_FI_DEV_POWER_USAGE": 612.345,
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.5,
        },
    )
    counters = [
        Counter("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
        Counter("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
        Counter("DCGM_FI_DRIVER_VERSION", "label", "Driver Version"),
        Counter("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ]
    labels = (
        'gpu="0",UUID="GPU-6d5c0ac5-74d7-3130-46f1-e93ed57f469a",pci_bus_id="00000000:18:00.0",'
        'device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a",DCGM_FI_DRIVER_VERSION="550.54.15"'
    )
    assert render("node-a", [gpu], counters) == (
        "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).\n"
        "# TYPE DCGM_FI_DEV_SM_CLOCK gauge\n"
        f"DCGM_FI_DEV_SM_CLOCK{{{labels}}} 1980\n"
        "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).\n"
        "# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n"
        f"DCGM_FI_DEV_POWER_USAGE{{{labels}}} 612.345000\n"
        "# HELP DCGM_FI_PROF_PIPE_TENSOR_ACTIVE Ratio of cycles the tensor (HMMA) pipe is active.\n"
        "# TYPE DCGM_FI_PROF_PIPE_TENSOR_ACTIVE gauge\n"
        f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{labels}}} 0.500000\n"
    )
    # the same GPU, the newer expfmt renderer: lower-case hostname, Go %g numbers, escaped help
    lower = labels.replace("Hostname=", "hostname=")
    assert render("node-a", [gpu], counters, flavor="expfmt").splitlines()[2::3] == [
        f"DCGM_FI_DEV_POWER_USAGE{{{lower}}} 612.345",
        f"DCGM_FI_DEV_SM_CLOCK{{{lower}}} 1980",
        f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{lower}}} 0.5",
    ]
    # no hostname, no Hostname label; an empty help keeps its space
    bare = render("", [gpu], [Counter("DCGM_FI_DEV_SM_CLOCK", "gauge", "")])
    assert bare.splitlines()[0] == "# HELP DCGM_FI_DEV_SM_CLOCK "
    assert "Hostname" not in bare


def test_family_order_is_dcgm_field_id_and_gpus_in_index_order() -> None:
    gpus = make_gpus(NODE, 4)
    families = parse_exposition(render(NODE, list(reversed(gpus)), read_counters(STOCK), DRIVER))
    # the order a real scrape shows (field ids 100, 101, 140, 150, 155, 156, 202, ..., 526, 1001, ...)
    assert list(families) == [
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_ENC_UTIL",
        "DCGM_FI_DEV_DEC_UTIL",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_RESERVED",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
    ]
    for fam in families.values():
        assert [dict(labels)["gpu"] for labels, _, _ in fam.samples] == ["0", "1", "2", "3"]


def test_expfmt_orders_families_by_name_and_samples_by_label_signature() -> None:
    gpus = make_gpus(NODE, 8)
    families = parse_exposition(render(NODE, gpus, read_counters(STOCK), DRIVER, flavor="expfmt"))
    assert list(families) == sorted(families)
    for fam in families.values():
        uuids = [dict(labels)["UUID"] for labels, _, _ in fam.samples]
        assert uuids == sorted(uuids)
        assert all(dict(labels)["hostname"] == NODE for labels, _, _ in fam.samples)
    energy = families["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].samples[0][2]
    assert re.fullmatch(r"\d\.\d+e\+\d\d", energy)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1"),
        (0.0, "0"),
        (-1.0, "-1"),
        (1980.0, "1980"),
        (612.345, "612.345"),
        (0.5, "0.5"),
        (123456.0, "123456"),
        (1234567.0, "1.234567e+06"),
        (1e6, "1e+06"),
        (3.5123456789e10, "3.5123456789e+10"),
        (0.0001, "0.0001"),
        (0.00001234, "1.234e-05"),
        (-2.5e-7, "-2.5e-07"),
        (1e100, "1e+100"),
        (float("nan"), "NaN"),
        (float("-inf"), "-Inf"),
    ],
)
def test_go_format_float(value: float, text: str) -> None:
    assert go_format_float(value) == text


def test_value_formatting_int_fields_plain_double_fields_six_decimals() -> None:
    families = parse_exposition(render(NODE, make_gpus(NODE, 8), read_counters(OURS), DRIVER))
    doubles = {"DCGM_FI_DEV_POWER_USAGE"} | {n for n in families if n.startswith("DCGM_FI_PROF_")} - {
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
    }
    for name, fam in families.items():
        pattern = r"\d+\.\d{6}" if name in doubles else r"-?\d+"
        for _, _, text in fam.samples:
            assert re.fullmatch(pattern, text), (name, text)
    # an int field given a float is written as the integer DCGM would hold
    gpu = make_gpus(NODE, 1)[0]
    gpu.values["DCGM_FI_DEV_GPU_TEMP"] = 71.6
    one = parse_exposition(render(NODE, [gpu], [Counter("DCGM_FI_DEV_GPU_TEMP", "gauge", "t")]))
    assert one["DCGM_FI_DEV_GPU_TEMP"].samples[0][2] == "72"


def test_blank_values_are_skipped_and_an_all_blank_family_disappears() -> None:
    gpus = make_gpus(NODE, 3)
    gpus[1].values["DCGM_FI_DEV_POWER_USAGE"] = FP64_BLANK
    gpus[2].values["DCGM_FI_DEV_GPU_TEMP"] = INT32_BLANK
    for gpu in gpus:
        gpu.values["DCGM_FI_DEV_FB_RESERVED"] = INT64_NOT_SUPPORTED
    text = render(NODE, gpus, read_counters(STOCK), DRIVER)
    families = parse_exposition(text)
    power = families["DCGM_FI_DEV_POWER_USAGE"].samples
    assert [dict(labels)["gpu"] for labels, _, _ in power] == ["0", "2"]
    assert [dict(labels)["gpu"] for labels, _, _ in families["DCGM_FI_DEV_GPU_TEMP"].samples] == ["0", "1"]
    assert "DCGM_FI_DEV_FB_RESERVED" not in families
    assert "FB_RESERVED" not in text  # no HELP or TYPE either
    assert "140737488355328" not in text and str(INT32_BLANK) not in text
    # a value next to a sentinel is a value: the exporter compares for equality only
    gpus[0].values["DCGM_FI_DEV_GPU_TEMP"] = INT64_BLANK - 1
    temps = parse_exposition(render(NODE, gpus[:1], read_counters(STOCK)))["DCGM_FI_DEV_GPU_TEMP"].samples
    assert temps[0][2] == str(INT64_BLANK - 1)


def test_a_blank_label_field_leaves_the_label_off() -> None:
    gpus = make_gpus(NODE, 1)
    gpus[0].values["DCGM_FI_DEV_PCIE_LINK_GEN"] = INT64_BLANK
    counters = [Counter("DCGM_FI_DEV_PCIE_LINK_GEN", "label", "gen"), Counter("DCGM_FI_DEV_SM_CLOCK", "gauge", "c")]
    labels = parse_exposition(render(NODE, gpus, counters))["DCGM_FI_DEV_SM_CLOCK"].samples[0][0]
    assert "DCGM_FI_DEV_PCIE_LINK_GEN" not in dict(labels)
    gpus[0].values["DCGM_FI_DEV_PCIE_LINK_GEN"] = 5
    labels = parse_exposition(render(NODE, gpus, counters))["DCGM_FI_DEV_SM_CLOCK"].samples[0][0]
    assert dict(labels)["DCGM_FI_DEV_PCIE_LINK_GEN"] == "5"


@pytest.mark.parametrize(
    ("xid", "msg"),
    [(0, "No Error"), (48, "Double Bit ECC Error"), (79, "GPU has fallen off the bus"), (999, "Unknown Error")],
)
def test_xid_carries_err_code_and_err_msg(xid: int, msg: str) -> None:
    gpus = make_gpus(NODE, 2)
    gpus[1].values["DCGM_FI_DEV_XID_ERRORS"] = xid
    fam = parse_exposition(render(NODE, gpus, read_counters(STOCK), DRIVER))["DCGM_FI_DEV_XID_ERRORS"]
    (labels0, v0, _), (labels1, v1, _) = fam.samples
    assert (dict(labels0)["err_code"], dict(labels0)["err_msg"], v0) == ("0", "No Error", 0.0)
    assert (dict(labels1)["err_code"], dict(labels1)["err_msg"], v1) == (str(xid), msg, float(xid))


def test_a_repeated_field_uses_its_first_row_and_unknown_fields_fail() -> None:
    counters = [
        Counter("DCGM_FI_DEV_GPU_TEMP", "gauge", "first"),
        Counter("DCGM_FI_DEV_GPU_TEMP", "counter", "second"),
    ]
    families = parse_exposition(render(NODE, make_gpus(NODE, 2), counters))
    assert (families["DCGM_FI_DEV_GPU_TEMP"].type, families["DCGM_FI_DEV_GPU_TEMP"].help) == ("gauge", "first")
    assert len(families["DCGM_FI_DEV_GPU_TEMP"].samples) == 2
    with pytest.raises(ValueError, match="could not find DCGM field"):
        render(NODE, make_gpus(NODE, 1), [Counter("DCGM_FI_DEV_GPU_TEMPERATURE", "gauge", "")])


def test_healthy_defaults_look_like_h100s_in_training() -> None:
    families = parse_exposition(render(NODE, make_gpus(NODE, 8), read_counters(OURS), DRIVER))

    def values(name: str) -> list[float]:
        return [v for _, v, _ in families[name].samples]

    assert all(45 <= v <= 70 for v in values("DCGM_FI_DEV_GPU_TEMP") + values("DCGM_FI_DEV_MEMORY_TEMP"))
    assert all(400 <= v <= 650 for v in values("DCGM_FI_DEV_POWER_USAGE"))
    assert set(values("DCGM_FI_DEV_SM_CLOCK")) == {1980.0}
    assert set(values("DCGM_FI_DEV_MEM_CLOCK")) == {2619.0}
    assert all(90 <= v <= 100 for v in values("DCGM_FI_DEV_GPU_UTIL"))
    assert all(0.4 <= v <= 0.6 for v in values("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"))
    assert set(values("DCGM_FI_DEV_XID_ERRORS")) == {0.0}
    assert set(values("DCGM_FI_DEV_CLOCKS_EVENT_REASONS")) <= {0.0, 4.0}
    for name in ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_ROW_REMAP_FAILURE"):
        assert set(values(name)) == {0.0}
    used, free = values("DCGM_FI_DEV_FB_USED"), values("DCGM_FI_DEV_FB_FREE")
    assert all(79000 < u + f < 81559 for u, f in zip(used, free, strict=True))
    # cumulative counters stay exact through Telegraf's float64
    for name in ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"):
        assert all(0 < v < 2**53 for v in values(name)), name
    # per-GPU variation, the same on every render
    assert len(set(values("DCGM_FI_DEV_POWER_USAGE"))) > 4
    again = parse_exposition(render(NODE, make_gpus(NODE, 8), read_counters(OURS), DRIVER))
    assert again["DCGM_FI_DEV_POWER_USAGE"].samples == families["DCGM_FI_DEV_POWER_USAGE"].samples


# ---------------------------------------------------------------------------------------------
# the HTTP server


def _get(url: str) -> tuple[int, dict[str, str], str]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode()


def _samples(text: str, name: str) -> dict[str, float]:
    return {dict(labels)["gpu"]: v for labels, v, _ in parse_exposition(text)[name].samples}


def test_server_serves_the_exposition_and_counts_scrapes() -> None:
    counters = read_counters(STOCK)
    with ExporterServer(NODE, 8, counters) as exporter:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/metrics", exporter.url)
        assert exporter.scrapes == 0
        status, headers, body = _get(exporter.url)
        assert status == 200
        assert headers["content-type"] == "text/plain; charset=utf-8"
        assert headers["x-content-type-options"] == "nosniff"
        assert "server" not in headers
        families = parse_exposition(body)
        assert set(families) == {c.field for c in counters if c.kind != "label"}
        assert exporter.scrapes == 1
        # not scrapes: the index page, the health check, unknown paths
        base = exporter.url.removesuffix("/metrics")
        assert _get(base + "/health")[2] == "KO"
        assert "GPU Exporter" in _get(base + "/")[2]
        with pytest.raises(urllib.error.HTTPError) as err:
            _get(base + "/nope")
        assert err.value.code == 404
        _get(exporter.url)
        assert exporter.scrapes == 2
        # a real exporter's body is larger than Go's 2048-byte buffer, so it goes out chunked
        conn = http.client.HTTPConnection(base.removeprefix("http://"), timeout=10)
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        assert resp.getheader("Transfer-Encoding") == "chunked"
        parse_exposition(resp.read().decode())
        conn.close()
        assert exporter.scrapes == 3


def test_set_shows_in_the_next_scrape_and_counters_grow_while_gauges_hold() -> None:
    with ExporterServer(NODE, 4, read_counters(STOCK)) as exporter:
        first = _get(exporter.url)[2]
        exporter.set(3, "DCGM_FI_DEV_XID_ERRORS", 79)
        exporter.set(1, "DCGM_FI_DEV_GPU_TEMP", 88)
        second = _get(exporter.url)[2]
        third = _get(exporter.url)[2]
        assert _samples(first, "DCGM_FI_DEV_XID_ERRORS") == {"0": 0, "1": 0, "2": 0, "3": 0}
        assert _samples(second, "DCGM_FI_DEV_XID_ERRORS") == {"0": 0, "1": 0, "2": 0, "3": 79}
        xid3 = [lab for lab, _, _ in parse_exposition(second)["DCGM_FI_DEV_XID_ERRORS"].samples][3]
        assert dict(xid3)["err_msg"] == "GPU has fallen off the bus"
        assert _samples(second, "DCGM_FI_DEV_GPU_TEMP")["1"] == 88
        assert _samples(first, "DCGM_FI_DEV_GPU_TEMP")["0"] == _samples(third, "DCGM_FI_DEV_GPU_TEMP")["0"]
        for name in ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"):
            a, b, c = (_samples(t, name) for t in (first, second, third))
            assert all(a[g] < b[g] < c[g] for g in a), name
        for name in ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_DEV_FB_USED"):
            assert _samples(first, name) == _samples(third, name), name
        # a counter set by hand shows exactly that, then grows on from it
        exporter.set(0, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 1000)
        fourth, fifth = _get(exporter.url)[2], _get(exporter.url)[2]
        assert _samples(fourth, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")["0"] == 1000
        assert _samples(fifth, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")["0"] > 1000
        assert exporter.scrapes == 5
        with pytest.raises(ValueError, match="could not find DCGM field"):
            exporter.set(0, "DCGM_FI_NOT_A_FIELD", 1)
