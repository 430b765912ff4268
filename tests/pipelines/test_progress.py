"""Where a restart of exact mode reads each partition from
(pipelines.state.progress): never past an event some model has not got in
its newest checkpoint, and not held back by models that had nothing there."""

import time

from pipelines.state import progress

P0, P1 = ("events", 0), ("events", 1)


def test_without_records_the_smallest_covered_offset_of_each_partition(tmp_path):
    covered = {"a": {P0: 40, P1: 7}, "b": {P0: 25}}
    assert progress.restart_offsets(str(tmp_path), covered) == {P0: 25, P1: 7}


def test_a_partition_never_sequenced_is_read_from_the_run_start(tmp_path):
    progress.write_run_start(str(tmp_path), {P0: 10, P1: 0})
    assert progress.restart_offsets(str(tmp_path), {"a": {P0: 40}}) == {P0: 10, P1: 0}


def test_the_sequenced_record_bounds_the_restart_by_the_models_that_had_parts(tmp_path):
    where = str(tmp_path)
    progress.write_run_start(where, {P0: 10, P1: 0})
    time.sleep(0.01)
    progress.write_sequenced(where, P0, 500, ["a", "b"])
    progress.write_sequenced(where, P1, 300, ["a"])
    covered = {"a": {P0: 480, P1: 290}, "b": {P0: 450}, "old": {P0: 12, P1: 3}}  # "old": no part this run
    assert progress.restart_offsets(where, covered) == {P0: 450, P1: 290}
    # a model with parts but no checkpoint (or none covering the partition) holds it at the run's start
    progress.write_sequenced(where, P1, 300, ["a", "new"])
    assert progress.restart_offsets(where, covered)[P1] == 0
    # never past how far the partition was sequenced
    assert progress.restart_offsets(where, {"a": {P0: 900, P1: 900}, "b": {P0: 900}})[P0] == 500


def test_records_of_an_earlier_run_are_ignored(tmp_path):
    where = str(tmp_path)
    progress.write_sequenced(where, P0, 500, ["a"])
    time.sleep(0.01)
    progress.write_run_start(where, {P0: 10})
    assert progress.restart_offsets(where, {"a": {P0: 480}}) == {P0: 10}
