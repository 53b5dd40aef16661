"""Which files each delta-rs-engine read was planned over, for the benchmark (off by default)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class Scan:
    """One table read as planned from the Delta log: which files Spark was given to read."""

    table: str
    files: int
    bytes: int  # sum of the files' sizes; Spark reads less when it prunes columns and row groups
    at: float  # time.time() when the read was planned


_scan_recorders: list[list[Scan]] = []


class recording_scans:
    """`with recording_scans() as scans:` collects a Scan for every delta-rs-engine read in
    this process (the benchmark attributes bytes read to assets with it). Off otherwise."""

    def __enter__(self) -> list[Scan]:
        self.scans: list[Scan] = []
        _scan_recorders.append(self.scans)
        return self.scans

    def __exit__(self, *exc) -> None:
        _scan_recorders.remove(self.scans)


def record_scan(path: str, actions: pa.Table) -> None:
    if _scan_recorders:
        size = pc.sum(actions["size_bytes"]).as_py() or 0  # null when no file is left
        scan = Scan(path.rstrip("/").rsplit("/", 1)[-1], actions.num_rows, int(size), time.time())
        for scans in _scan_recorders:
            scans.append(scan)
