r"""A local Redfish BMC stand-in for Telegraf's inputs.redfish (v1.37.2).

What the plugin requests (read from plugins/inputs/redfish/redfish.go and confirmed by running the
real binary): exactly four GETs per gather, in this order, all with HTTP basic auth and
`Accept: application/json`, `OData-Version: 4.0`; never the service root or any collection:

    /redfish/v1/Systems/<computer_system_id>      -> HostName, Links.Chassis[*]
    /redfish/v1/Chassis/1                         -> the linked chassis: Thermal and Power links
    /redfish/v1/Chassis/1/Power                   (include_metrics order: "power" first by default)
    /redfish/v1/Chassis/1/Thermal

Any non-200 answer (a 401 for wrong credentials) fails the whole gather: no metrics, the error
"received status code 401 (Unauthorized) for address ..." and, with --test, exit status 1. Plain
http:// works; the plugin does not insist on TLS. Options it needs: address, username, password,
computer_system_id (here SYSTEM_ID, "1"); include_metrics defaults to ["power", "thermal"].

What Telegraf 1.37.2 emits (`telegraf --test` prefixes each line with "> "; it sorts fields, while
outputs.file leaves field order unstable; tags are always sorted). Every measurement has the tags
address (host of the URL, no port), source (the system's HostName), member_id and name (the
Redfish MemberId and Name, so names carry escaped spaces); all but powercontrol also carry state and
health (Status.State / Status.Health: tags, not fields). The agent adds host unless omit_hostname.
Fields whose JSON value is missing or null are left out; all are floats except where marked `i`:

    redfish_power_powercontrol    average_consumed_watts, interval_in_min (int, always present: 0i if
                                  absent), max_consumed_watts, min_consumed_watts, power_allocated_watts,
                                  power_available_watts, power_capacity_watts, power_consumed_watts,
                                  power_requested_watts
    redfish_power_powersupplies   last_power_output_watts, line_input_voltage, power_capacity_watts,
                                  power_input_watts, power_output_watts
    redfish_power_voltages        reading_volts, lower/upper_threshold_critical, lower/upper_threshold_fatal
    redfish_thermal_temperatures  reading_celsius, lower/upper_threshold_critical, lower/upper_threshold_fatal
    redfish_thermal_fans          with ReadingUnits "RPM": reading_rpm and the four thresholds, all int
                                  (the plugin decodes them as int64, so the JSON must hold integers);
                                  otherwise only reading_percent (int)

From this stand-in (4 PSUs, 6 fans, `omit_hostname = true`; PSU3 failed, timestamps cut,
lines wrapped: a trailing backslash joins the next line with its indentation removed):

    redfish_power_powercontrol,address=127.0.0.1,member_id=0,name=System\ Power\ Control,source=gpu-node-017 \
        average_consumed_watts=6000,interval_in_min=1i,max_consumed_watts=6180,min_consumed_watts=5820,\
        power_capacity_watts=12000,power_consumed_watts=6000
    redfish_power_powersupplies,address=127.0.0.1,health=OK,member_id=0,name=PSU1,source=gpu-node-017,state=Enabled \
        last_power_output_watts=2000,line_input_voltage=207,power_capacity_watts=3000,power_input_watts=2116.4,\
        power_output_watts=2000
    redfish_power_powersupplies,address=127.0.0.1,health=Critical,member_id=2,name=PSU3,source=gpu-node-017,\
        state=Enabled last_power_output_watts=0,line_input_voltage=208,power_capacity_watts=3000,\
        power_input_watts=0,power_output_watts=0
    redfish_power_voltages,address=127.0.0.1,health=OK,member_id=0,name=12V,source=gpu-node-017,state=Enabled \
        lower_threshold_critical=10.8,reading_volts=12.06,upper_threshold_critical=13.2
    redfish_thermal_temperatures,address=127.0.0.1,health=OK,member_id=0,name=Inlet\ Temp,source=gpu-node-017,\
        state=Enabled lower_threshold_critical=3,lower_threshold_fatal=-7,reading_celsius=24,\
        upper_threshold_critical=42,upper_threshold_fatal=47
    redfish_thermal_fans,address=127.0.0.1,health=OK,member_id=0,name=FAN1,source=gpu-node-017,state=Enabled \
        lower_threshold_critical=700i,lower_threshold_fatal=420i,reading_rpm=8400i,\
        upper_threshold_critical=25200i,upper_threshold_fatal=25480i

Tag sets: the default include_tag_sets = ["chassis.location"] adds datacenter, room, rack and row only
when the chassis has a Location (this one has none, so nothing is added); "chassis" adds
chassis_chassistype, chassis_health, chassis_manufacturer, chassis_model, chassis_partnumber,
chassis_powerstate, chassis_serialnumber, chassis_sku and chassis_state to every metric.

The modelled machine is a Supermicro SYS-821GE-TNHR (HGX H100 8-GPU): PSUs PSU1.. of 3000 W sharing
min(6800 W, half the installed capacity) evenly; 12 temperatures (Inlet Temp, Exhaust Temp, CPU1-2
Temp, GPU1-8 Temp) whose health is "Warning" above the non-critical and "Critical" above the
critical threshold; fans FAN1.. in RPM; four rail voltages.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import zlib
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, ClassVar

SYSTEM_ID = "1"
CHASSIS_ID = "1"

_V1 = "/redfish/v1"
_SYSTEM = f"{_V1}/Systems/{SYSTEM_ID}"
_CHASSIS = f"{_V1}/Chassis/{CHASSIS_ID}"
_THERMAL = f"{_CHASSIS}/Thermal"
_POWER = f"{_CHASSIS}/Power"

_PSU_CAPACITY_W = 3000.0
_PSU_EFFICIENCY = 0.945  # 80 PLUS Titanium at ~50 % load
_FAILED_PSU_STATES = ("Enabled", "UnavailableOffline")


def _health(reading: float, warning: float, critical: float) -> str:
    """Sensor health as a BMC derives it from its upper thresholds."""
    if reading >= critical:
        return "Critical"
    if reading >= warning:
        return "Warning"
    return "OK"


def _worst(healths: list[str]) -> str:
    for level in ("Critical", "Warning"):
        if level in healths:
            return level
    return "OK"


class _PSU:
    __slots__ = ("failed_state", "line_voltage")

    def __init__(self, line_voltage: float) -> None:
        self.line_voltage = line_voltage
        self.failed_state: str | None = None


class RedfishServer:
    """An HGX H100 8-GPU server's BMC on 127.0.0.1, over plain HTTP with HTTP basic auth.

    Telegraf's inputs.redfish needs `computer_system_id = "1"` (SYSTEM_ID) for it. Readings are
    deterministic; `fail_psu` and `set_inlet` change what the next request sees. PSUs share the
    system load evenly, so when one fails the others carry its share (as N+N supplies do).
    """

    def __init__(
        self, hostname: str, psus: int = 4, fans: int = 6, username: str = "aiops", password: str = "secret"
    ) -> None:
        if not 1 <= psus <= 16:
            raise ValueError(f"psus must be 1..16, got {psus}")
        if not 1 <= fans <= 32:
            raise ValueError(f"fans must be 1..32, got {fans}")
        self.hostname = hostname
        self.username = username
        self.password = password
        self.requests: list[str] = []
        self.auth_failures = 0
        self._lock = threading.Lock()
        self._psus = [_PSU(line_voltage=207.0 + 0.5 * (i % 4)) for i in range(psus)]
        self._fans = fans
        self._inlet_c = 24.0
        # an 8x700 W HGX baseboard under training load, two CPUs, NICs and fans; never more than
        # half the installed PSU capacity, so redundancy holds while one PSU is lost
        self._load_w = min(6800.0, 0.5 * _PSU_CAPACITY_W * psus)
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._http.daemon_threads = True
        self._thread: threading.Thread | None = None
        self.address = f"http://127.0.0.1:{self._http.server_address[1]}"

    # ---- control -------------------------------------------------------------------------

    def fail_psu(self, index: int, state: str = "Enabled") -> None:
        """PSU `index` (0-based: MemberId `index`, Name `PSU<index+1>`) fails.

        It then reports Status Health "Critical" with State `state` — "Enabled" (what Dell iDRAC and
        Supermicro BMCs report for a faulted supply that is still seated) or "UnavailableOffline"
        (lost its input feed; LineInputVoltage then reads 0) — and 0 W in and out.
        """
        if state not in _FAILED_PSU_STATES:
            raise ValueError(f"state must be one of {_FAILED_PSU_STATES}, got {state!r}")
        with self._lock:
            if not 0 <= index < len(self._psus):
                raise IndexError(f"no PSU {index}: this BMC has PSUs 0..{len(self._psus) - 1}")
            self._psus[index].failed_state = state

    def set_inlet(self, celsius: float) -> None:
        """The inlet ("Inlet Temp") reading; exhaust and fan speeds follow it."""
        with self._lock:
            self._inlet_c = float(celsius)

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._http.serve_forever, name="redfish-bmc", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._http.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._http.server_close()

    def __enter__(self) -> RedfishServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ---- resources -----------------------------------------------------------------------

    def resource(self, path: str) -> dict[str, Any] | None:
        """The JSON body served at `path`, or None if there is no such resource."""
        with self._lock:
            builder = {
                _V1: self._service_root,
                f"{_V1}/Systems": self._systems,
                _SYSTEM: self._system,
                f"{_V1}/Chassis": self._chassis_collection,
                _CHASSIS: self._chassis,
                _THERMAL: self._thermal,
                _POWER: self._power,
            }.get(path)
            return None if builder is None else builder()

    def _service_root(self) -> dict[str, Any]:
        return {
            "@odata.id": _V1,
            "@odata.type": "#ServiceRoot.v1_11_0.ServiceRoot",
            "Id": "RootService",
            "Name": "Root Service",
            "RedfishVersion": "1.11.0",
            "Systems": {"@odata.id": f"{_V1}/Systems"},
            "Chassis": {"@odata.id": f"{_V1}/Chassis"},
        }

    def _systems(self) -> dict[str, Any]:
        return {
            "@odata.id": f"{_V1}/Systems",
            "@odata.type": "#ComputerSystemCollection.ComputerSystemCollection",
            "Name": "Computer System Collection",
            "Members": [{"@odata.id": _SYSTEM}],
            "Members@odata.count": 1,
        }

    def _chassis_collection(self) -> dict[str, Any]:
        return {
            "@odata.id": f"{_V1}/Chassis",
            "@odata.type": "#ChassisCollection.ChassisCollection",
            "Name": "Chassis Collection",
            "Members": [{"@odata.id": _CHASSIS}],
            "Members@odata.count": 1,
        }

    def _system(self) -> dict[str, Any]:
        return {
            "@odata.id": _SYSTEM,
            "@odata.type": "#ComputerSystem.v1_16_0.ComputerSystem",
            "Id": SYSTEM_ID,
            "Name": "System",
            "HostName": self.hostname,
            "Manufacturer": "Supermicro",
            "Model": "SYS-821GE-TNHR",
            "SerialNumber": f"S{zlib.crc32(self.hostname.encode()) % 10**9:09d}",
            "PowerState": "On",
            "Status": {"State": "Enabled", "Health": self._chassis_health()},
            "ProcessorSummary": {"Count": 2, "Model": "Intel(R) Xeon(R) Platinum 8480+"},
            "Links": {"Chassis": [{"@odata.id": _CHASSIS}]},
        }

    def _chassis_health(self) -> str:
        return "Critical" if any(p.failed_state for p in self._psus) else self._thermal_health()

    def _thermal_health(self) -> str:
        return _worst([t["Status"]["Health"] for t in self._temperatures()])

    def _chassis(self) -> dict[str, Any]:
        return {
            "@odata.id": _CHASSIS,
            "@odata.type": "#Chassis.v1_14_0.Chassis",
            "Id": CHASSIS_ID,
            "Name": "Computer System Chassis",
            "ChassisType": "RackMount",
            "Manufacturer": "Supermicro",
            "Model": "SYS-821GE-TNHR",
            "PartNumber": "CSE-GP801TS-R000NP",
            "SKU": "HGX-H100-8GPU",
            "SerialNumber": "C8010MM48A20123",
            "PowerState": "On",
            "Status": {"State": "Enabled", "Health": self._chassis_health()},
            "Thermal": {"@odata.id": _THERMAL},
            "Power": {"@odata.id": _POWER},
            "Links": {"ComputerSystems": [{"@odata.id": _SYSTEM}]},
        }

    def _temperatures(self) -> list[dict[str, Any]]:
        inlet = self._inlet_c
        # the fans take up half of an inlet rise; the other half reaches the CPUs and GPUs
        rise = 0.5 * (inlet - 24.0)
        # name, reading, upper non-critical, upper critical, upper fatal, lower critical, lower fatal
        sensors: list[tuple[str, float, float, float, float, float | None, float | None]] = [
            ("Inlet Temp", inlet, 38.0, 42.0, 47.0, 3.0, -7.0),
            ("Exhaust Temp", inlet + 17.0, 65.0, 70.0, 75.0, 3.0, -7.0),
            ("CPU1 Temp", 58.0 + rise, 90.0, 95.0, 100.0, None, None),
            ("CPU2 Temp", 61.0 + rise, 90.0, 95.0, 100.0, None, None),
        ]
        sensors += [(f"GPU{g + 1} Temp", 63.0 + (g % 4) * 1.5 + rise, 83.0, 87.0, 90.0, None, None) for g in range(8)]
        out = []
        for i, (name, reading, warning, critical, fatal, lower_crit, lower_fatal) in enumerate(sensors):
            sensor: dict[str, Any] = {
                "@odata.id": f"{_THERMAL}#/Temperatures/{i}",
                "MemberId": str(i),
                "Name": name,
                "ReadingCelsius": round(reading, 1),
                "UpperThresholdNonCritical": warning,
                "UpperThresholdCritical": critical,
                "UpperThresholdFatal": fatal,
                "Status": {"State": "Enabled", "Health": _health(reading, warning, critical)},
            }
            if lower_crit is not None:
                sensor["LowerThresholdCritical"] = lower_crit
                sensor["LowerThresholdFatal"] = lower_fatal
            out.append(sensor)
        return out

    def _thermal(self) -> dict[str, Any]:
        # fans speed up 250 RPM per degree of inlet above 24 °C, within what the fans can do
        rpm = max(3000, min(16800, round(8400 + 250 * (self._inlet_c - 24.0))))
        fans = [
            {
                "@odata.id": f"{_THERMAL}#/Fans/{i}",
                "MemberId": str(i),
                "Name": f"FAN{i + 1}",
                # integers: Telegraf decodes fan readings and thresholds as int64
                "Reading": rpm + 70 * (i % 3),
                "ReadingUnits": "RPM",
                "LowerThresholdCritical": 700,
                "LowerThresholdFatal": 420,
                "UpperThresholdCritical": 25200,
                "UpperThresholdFatal": 25480,
                "Status": {"State": "Enabled", "Health": "OK"},
            }
            for i in range(self._fans)
        ]
        return {
            "@odata.id": _THERMAL,
            "@odata.type": "#Thermal.v1_7_0.Thermal",
            "Id": "Thermal",
            "Name": "Thermal",
            "Temperatures": self._temperatures(),
            "Fans": fans,
        }

    def _power(self) -> dict[str, Any]:
        working = [p for p in self._psus if p.failed_state is None]
        load = self._load_w if working else 0.0
        share = load / len(working) if working else 0.0
        supplies = []
        for i, psu in enumerate(self._psus):
            ok = psu.failed_state is None
            output = round(share, 1) if ok else 0.0
            line = 0.0 if psu.failed_state == "UnavailableOffline" else psu.line_voltage
            supplies.append(
                {
                    "@odata.id": f"{_POWER}#/PowerSupplies/{i}",
                    "MemberId": str(i),
                    "Name": f"PSU{i + 1}",
                    "Manufacturer": "Delta",
                    "Model": "PWS-3K01G-2R",
                    "PowerSupplyType": "AC",
                    "LineInputVoltageType": "ACHighLine",
                    "LineInputVoltage": line,
                    "PowerCapacityWatts": _PSU_CAPACITY_W,
                    "PowerInputWatts": round(output / _PSU_EFFICIENCY, 1),
                    "PowerOutputWatts": output,
                    "LastPowerOutputWatts": output,
                    "Status": (
                        {"State": "Enabled", "Health": "OK"}
                        if ok
                        else {"State": psu.failed_state, "Health": "Critical"}
                    ),
                }
            )
        voltages = [
            # name, reading, lower critical, upper critical
            ("12V", 12.06, 10.8, 13.2),
            ("5VCC", 5.02, 4.5, 5.5),
            ("3.3VCC", 3.31, 2.97, 3.63),
            ("VBAT", 3.05, 2.6, 3.5),
        ]
        redundant = len(working) >= max(1, len(self._psus) // 2) and len(working) < len(self._psus)
        return {
            "@odata.id": _POWER,
            "@odata.type": "#Power.v1_6_0.Power",
            "Id": "Power",
            "Name": "Power",
            "PowerControl": [
                {
                    "@odata.id": f"{_POWER}#/PowerControl/0",
                    "MemberId": "0",
                    "Name": "System Power Control",
                    "PowerConsumedWatts": round(load, 1),
                    "PowerCapacityWatts": _PSU_CAPACITY_W * len(self._psus),
                    "PowerMetrics": {
                        "IntervalInMin": 1,
                        "AverageConsumedWatts": round(load, 1),
                        "MinConsumedWatts": round(load * 0.97, 1),
                        "MaxConsumedWatts": round(load * 1.03, 1),
                    },
                    "Status": {"State": "Enabled", "Health": "OK"},
                }
            ],
            "PowerSupplies": supplies,
            "Voltages": [
                {
                    "@odata.id": f"{_POWER}#/Voltages/{i}",
                    "MemberId": str(i),
                    "Name": name,
                    "ReadingVolts": reading,
                    "LowerThresholdCritical": low,
                    "UpperThresholdCritical": high,
                    "Status": {"State": "Enabled", "Health": "OK"},
                }
                for i, (name, reading, low, high) in enumerate(voltages)
            ],
            "Redundancy": [
                {
                    "@odata.id": f"{_POWER}#/Redundancy/0",
                    "MemberId": "0",
                    "Name": "PSU Redundancy",
                    "Mode": "N+m",
                    "MinNumNeeded": max(1, len(self._psus) // 2),
                    "MaxNumSupported": len(self._psus),
                    "Status": {
                        "State": "Enabled",
                        "Health": "OK" if len(working) == len(self._psus) else ("Warning" if redundant else "Critical"),
                    },
                }
            ],
        }

    def authorized(self, header: str | None) -> bool:
        if header is None or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        return user == self.username and password == self.password


def _make_handler(bmc: RedfishServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 10
        server_version = "RedfishStandIn/1.0"
        # the service root is readable without credentials, as DSP0266 requires
        open_paths: ClassVar[frozenset[str]] = frozenset({_V1})

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0].split("#", 1)[0]
            if len(path) > 1:
                path = path.rstrip("/")
            with bmc._lock:
                bmc.requests.append(path)
            if path not in self.open_paths and not bmc.authorized(self.headers.get("Authorization")):
                with bmc._lock:
                    bmc.auth_failures += 1
                self._send(HTTPStatus.UNAUTHORIZED, _error("Base.1.8.InsufficientPrivilege", "Unauthorized"))
                return
            body = bmc.resource(path)
            if body is None:
                self._send(HTTPStatus.NOT_FOUND, _error("Base.1.8.ResourceMissingAtURI", f"{path} not found"))
                return
            self._send(HTTPStatus.OK, body)

        def _send(self, status: HTTPStatus, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("OData-Version", "4.0")
            self.send_header("Content-Length", str(len(data)))
            if status == HTTPStatus.UNAUTHORIZED:
                self.send_header("WWW-Authenticate", 'Basic realm="Redfish"')
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}
