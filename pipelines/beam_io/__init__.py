"""Beam I/O for Kafka as thin adapters over :mod:`pipelines.kafka`:
:class:`ReadFromKafka` and :class:`ReadFromKafkaRanges` (a splittable DoFn,
one restriction per partition) and :class:`WriteToKafka`.

Beam's own ``apache_beam.io.kafka.ReadFromKafka`` is a Java cross-language
transform (it needs jars and an expansion service). These read and write
Kafka with confluent-kafka from plain Python DoFns, so they run on any
portable runner (FnApiRunner, PortableRunner, Flink, Dataflow) with nothing
runner-specific.
"""

from pipelines.kafka.consumer import UNBOUNDED_STOP, KafkaMessage, PartitionRange, StopRule

from .read import ReadFromKafka, ReadFromKafkaRanges
from .write import WriteToKafka

__all__ = ["KafkaMessage", "PartitionRange", "StopRule", "UNBOUNDED_STOP", "ReadFromKafka", "ReadFromKafkaRanges",
           "WriteToKafka"]
