"""The incident page's series from the real InfluxDB the daemon writes to: a GPU's gauge as it
was stored, a NIC's counter as its per-second rate, only inside the window asked for."""

from __future__ import annotations

import urllib.request

import pytest

from show.series import InfluxSeries
from vocab.settings import InfluxSettings

pytestmark = pytest.mark.services

T = 1_767_225_600


def test_series_come_back_from_influxdb(influx_settings: InfluxSettings) -> None:
    lines = []
    for i in range(20):
        t = (T + 30 * i) * 10**9
        lines.append(f"gpu,gpu=n1-gpu0,node=n1 DCGM_FI_DEV_GPU_TEMP={60 + i} {t}")
        lines.append(f"nic,nic=n1-nic0,node=n1 symbol_error={100 * i}i {t}")
    lines.append(f"gpu,gpu=n1-gpu1,node=n1 DCGM_FI_DEV_GPU_TEMP=99 {T * 10**9}")  # another GPU
    url = f"{influx_settings.url}/write?db={influx_settings.database}&precision=ns"
    request = urllib.request.Request(url, "\n".join(lines).encode(), method="POST")
    request.add_header("Authorization", f"Token {influx_settings.token.get_secret_value()}")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 204
    series = InfluxSeries(influx_settings.url, influx_settings.database, influx_settings.token.get_secret_value())
    kinds = {"n1-gpu0": "gpu", "n1-nic0": "nic"}
    got = series.get(kinds, [("n1-gpu0", "DCGM_FI_DEV_GPU_TEMP"), ("n1-nic0", "symbol_error")], T + 60, T + 300)
    temps = got[("n1-gpu0", "DCGM_FI_DEV_GPU_TEMP")]
    assert [t for t, _ in temps] == [float(T + 30 * i) for i in range(2, 11)]
    assert [v for _, v in temps] == [float(60 + i) for i in range(2, 11)]
    rates = got[("n1-nic0", "symbol_error")]
    assert rates and all(abs(v - 100 / 30) < 1e-9 for _, v in rates)  # 100 errors per 30 s
