"""Reading Delta tables in tests: always through the product's abort-safe reader
(`resources.tables.delta_log`), never `DeltaTable.to_pyarrow_table()` or `.to_pandas()`,
whose Python file handler can abort the test process at exit."""

from __future__ import annotations

from typing import Sequence

import pandas as pd
import pyarrow as pa
from deltalake import DeltaTable

from resources.tables.delta_log import NoTableAt, read_delta_arrow, scan_arrow


def read_table(path, columns: Sequence[str] | None = None, version: int | None = None) -> pa.Table:
    """The table at `path` (at `version`, when given) as Arrow; FileNotFoundError when missing."""
    if version is not None:
        return scan_arrow(DeltaTable(str(path), version=version), columns)
    table = read_delta_arrow(str(path), columns)
    if table is None:
        raise NoTableAt(str(path))
    return table


def read_pandas(path, columns: Sequence[str] | None = None) -> pd.DataFrame:
    return read_table(path, columns).to_pandas()
