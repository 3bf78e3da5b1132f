"""The synthetic cluster: topology builders, workload, metric models, the fault injector (kinds
from the registry, vocab/faults.toml) and emitters. A telemetry source like a collector; the
production path never imports it."""
