"""What the runner does between runs so that a process running run after run stays small and
fast: the run's reference cycles (which hold Py4J references to its DataFrames) are collected,
and the objects that live as long as the process are not walked by every collection."""
import gc
import weakref

from incremental_assets.process_memory import keep_long_lived_out_of_collections, release_jvm_references


class Node:
    def __init__(self):
        self.other = self


def test_long_lived_objects_are_frozen_once_and_a_runs_cycles_are_still_collected():
    frozen_before = gc.get_freeze_count()
    try:
        keep_long_lived_out_of_collections()
        frozen = gc.get_freeze_count()
        assert frozen > 0
        keep_long_lived_out_of_collections()  # a second run's start freezes nothing more
        assert gc.get_freeze_count() == frozen

        cycle = Node()  # made during a run, after the freeze
        alive = weakref.ref(cycle)
        del cycle
        release_jvm_references()
        assert alive() is None
    finally:
        if not frozen_before:
            gc.unfreeze()
