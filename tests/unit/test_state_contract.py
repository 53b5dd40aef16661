"""Every table of the warehouse answers the state contract (`state.contract`): its owner, how its
rows before a moved start leave, how an erased user's rows leave. A table added to the warehouse
without an answer fails here, before any capability can miss it."""
import importlib

from incremental_assets.names import WAREHOUSE_TABLES
from incremental_assets.state.contract import CONTRACTS, RowsBeforeStart
from incremental_assets.state.start_moved import DAY_TABLES, LOAD_TIME_TABLES


def test_every_warehouse_table_has_a_contract_and_no_other_does():
    assert set(CONTRACTS) == set(WAREHOUSE_TABLES), set(CONTRACTS) ^ set(WAREHOUSE_TABLES)


def test_each_owner_is_a_module_that_names_its_table():
    for name, contract in CONTRACTS.items():
        package = "resources" if contract.owner.startswith("resources.") else "incremental_assets"
        module = importlib.import_module(contract.owner if package == "resources" else f"{package}.{contract.owner}")
        source = open(module.__file__).read()
        constants = [constant for constant, value in vars(importlib.import_module("incremental_assets.names")).items()
                     if value == name and constant.isupper()]
        assert any(constant in source for constant in constants), (name, contract.owner, constants)


def test_tables_removed_by_time_say_by_which_column():
    for name, contract in CONTRACTS.items():
        timed = contract.before_start in (RowsBeforeStart.LOAD_TIME, RowsBeforeStart.EVENT_DAY, RowsBeforeStart.LEDGER)
        assert (contract.time_column is not None) == timed, name


def test_start_moved_removes_exactly_the_tables_the_contract_names():
    removed = {name for name, _ in LOAD_TIME_TABLES} | set(DAY_TABLES)
    expected = {name for name, c in CONTRACTS.items()
                if c.before_start in (RowsBeforeStart.LOAD_TIME, RowsBeforeStart.EVENT_DAY)}
    assert removed == expected
