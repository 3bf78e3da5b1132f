"""Two root-cause daemons in one group: one holds every partition, the other stands by. The group
is rebalanced three times while `aiops gen` streams an hour into it: a standby joins (the active
keeps everything), the active is killed (the standby takes over from the checkpoint), and a new
member joins the survivor. What reaches the topics equals the offline run of the same data,
incident for incident and id for id, anomaly for anomaly."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ingest.kafka import STANDBY, OneActiveAssignor
from tests.faults.daemons import reaped, replay
from vocab.settings import KafkaSettings


def _member(member_id: str, started_ns: int) -> SimpleNamespace:
    metadata = SimpleNamespace(topics=["aiops.telemetry"], user_data=str(started_ns).encode())
    return SimpleNamespace(member_id=member_id, metadata=metadata)


def test_the_oldest_member_gets_every_partition_and_the_others_none() -> None:
    cluster = SimpleNamespace(partitions_for_topic=lambda topic: {2, 0, 1})
    members = [_member("young", 300), _member("old", 100), _member("middle", 200)]
    got = OneActiveAssignor().assign(cluster, members)
    assert got["old"].partitions() and sorted(tp.partition for tp in got["old"].partitions()) == [0, 1, 2]
    assert got["young"].partitions() == [] and got["middle"].partitions() == []
    assert got["young"].user_data == got["middle"].user_data == STANDBY and got["old"].user_data == b""


@pytest.mark.services
@pytest.mark.slow
def test_a_standby_takes_over_from_the_checkpoint_and_newcomers_wait(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    r = replay(kafka_settings, tmp_path)  # one state directory for the whole group
    with reaped() as track:
        first = track(r.aiops(*r.daemon))
        time.sleep(2)  # the first is the elder: it holds the partitions
        standby = track(r.aiops(*r.daemon, "--stop-when-idle", "15"))
        r.publish(0)  # two thirds of the hour; the rest comes after the kill
        r.wait_for_first_incident()
        r.wait_for_checkpoint(f"run-{kafka_settings.ingest_group}-run.ckpt")
        first.kill()
        _, err_first = first.communicate(timeout=60)
        assert "standing by" not in err_first
        time.sleep(20)  # the group notices the dead member (session timeout) and the standby takes over
        newcomer = track(r.aiops(*r.daemon))
        r.publish(1)
        _, err = standby.communicate(timeout=600)
        assert standby.returncode == 0, err[-3000:]
        assert "standing by" in err and "resuming from the checkpoint" in err
        newcomer.send_signal(signal.SIGTERM)  # it never held anything: it stops without a checkpoint
        _, err_new = newcomer.communicate(timeout=60)
        assert newcomer.returncode == 0, err_new[-3000:]
        assert "standing by" in err_new
    r.assert_topics_equal_offline()
