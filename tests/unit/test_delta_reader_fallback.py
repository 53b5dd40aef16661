"""resources.tables.delta_log.read_on_executors: a source whose files are not its rows as they
are (deletion vectors, column mapping) is read by Spark's Delta reader; without one, the
driver reads it, and the log says so."""

import logging

from resources.tables.delta_log import read_on_executors


class _SessionWithoutDelta:
    """A Spark session without the Delta jars: its reader knows no "delta" source."""

    @property
    def read(self):
        return self

    def format(self, _name):
        return self

    def option(self, *_):
        return self

    def load(self, _path):
        raise RuntimeError("[DATA_SOURCE_NOT_FOUND] Failed to find the data source: delta.")


def test_without_a_delta_reader_the_table_is_left_to_the_driver_and_the_log_says_so(caplog):
    with caplog.at_level(logging.WARNING, logger="resources.tables.delta_log"):
        assert read_on_executors(_SessionWithoutDelta(), "/lake/events", 3) is None
    assert all(part in caplog.text for part in ("/lake/events", "DATA_SOURCE_NOT_FOUND", "driver", "make setup"))
