"""The job's own voice (issue 68): doors for what a training job says about itself.

- NCCL Inspector's JSON lines (`read_inspector`) and its Prometheus metrics, through the
  remote-write door or read from the textfile (`read_series`, `read_textfile`);
- the training step signal, a line-protocol `train_step` line per rank per step written by
  `aiops_step` (stdlib only, copied into training scripts), or a loop's step log shaped like
  train-steps.csv (`read_step_lines`, `read_step_csv`);
- PyTorch's NCCL flight recorder, its JSON dump only (`read_flight_recorder`): a pickle is refused.

Each door is a pure function of bytes (or series) to typed records (ingest.jobs.records) and dead
letters with the reason, under the id grammar (vocab.ids) and bounds like every other door.
"""

from ingest.jobs._common import Read, RefusedError
from ingest.jobs.flight_recorder import read_flight_recorder, read_flight_recorder_file, refusal_of_bytes
from ingest.jobs.nccl_inspector import read_inspector
from ingest.jobs.nccl_prometheus import PromRead, read_series, read_textfile
from ingest.jobs.records import Collective, CollectiveSummary, FlightDump, FlightEntry, GroupStatus, Step, Trace
from ingest.jobs.steps import read_step_csv, read_step_lines

__all__ = [
    "Collective",
    "CollectiveSummary",
    "FlightDump",
    "FlightEntry",
    "GroupStatus",
    "PromRead",
    "Read",
    "RefusedError",
    "Step",
    "Trace",
    "read_flight_recorder",
    "read_flight_recorder_file",
    "read_inspector",
    "read_series",
    "read_step_csv",
    "read_step_lines",
    "read_textfile",
    "refusal_of_bytes",
]
