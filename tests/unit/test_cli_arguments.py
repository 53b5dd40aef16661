"""The command line's arguments: bad values are refused naming the option and what it expects,
`now` is a time, the global options go before or after the command, and runs need an instance
the UI can see. None of these start Spark."""
import os
from datetime import datetime, timezone

import pytest

from incremental_assets import cli


def parse(*argv):
    return cli.build_parser().parse_args(list(argv))


@pytest.mark.parametrize("argv,option", [(["run", "--until", "yesterday"], "--until"),
                                         (["limits", "--now", "2026-13-01"], "--now"),
                                         (["maintain", "--now", ""], "--now")])
def test_a_bad_time_names_its_option_and_the_forms_it_takes(argv, option, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse(*argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert f"argument {option}: {argv[-1]!r} is not a time" in err
    assert "ISO 8601" in err and "'now'" in err
    assert "invalid" not in err  # argparse's own "invalid _parse_ts value" is gone


def test_until_now_is_the_current_time_in_utc():
    before = datetime.now(timezone.utc)
    until = parse("run", "--until", "now").until
    assert before <= until <= datetime.now(timezone.utc)


def test_a_naive_time_and_a_date_are_utc():
    assert parse("run", "--until", "2026-01-05T02:30").until == datetime(2026, 1, 5, 2, 30, tzinfo=timezone.utc)
    assert parse("limits", "--now", "2026-01-05").now == datetime(2026, 1, 5, tzinfo=timezone.utc)


def test_global_options_go_before_or_after_the_command():
    before = parse("--warehouse", "/w", "--source", "/s", "limits")
    after = parse("limits", "--warehouse", "/w", "--source", "/s")
    mixed = parse("--warehouse", "/w", "run", "--until", "now", "--source", "/s")
    assert (before.warehouse, before.source) == (after.warehouse, after.source) == ("/w", "/s")
    assert (mixed.warehouse, mixed.source) == ("/w", "/s")
    assert parse("limits").warehouse is None


def test_a_run_without_dagster_home_is_refused_naming_it(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv("INCREMENTAL_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.setenv("INCREMENTAL_SOURCE_PATH", str(tmp_path / "lake"))

    assert cli.main(["run", "--until", "2026-01-05T02:00:00Z"]) == 2
    assert cli.main(["backfill", "--start", "2026-01-05", "--end", "2026-01-05"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all("DAGSTER_HOME is not set" in line and "--ephemeral-instance" in line
                                 for line in err), err
    assert not (tmp_path / "warehouse").exists()


def test_ephemeral_instance_is_taken_only_when_asked():
    assert parse("run", "--until", "now").ephemeral_instance is False
    assert parse("backfill", "--start", "2026-01-05", "--end", "2026-01-06", "--ephemeral-instance").ephemeral_instance


def test_a_report_closes_with_one_line_of_runs_time_and_what_waits():
    from incremental_assets.runner import JobRun, RunReport

    report = RunReport(runs=[JobRun("hourly_job", "r1", True, seconds=12.4),
                             JobRun("daily_job", "r2", False, ("daily_aggregates: boom",), seconds=3.0)])
    assert report.summary() == "done: 2 run(s) in 15 s, 1 failed"
    report.refused = "1 event day(s) fail-locked"
    assert report.summary().endswith("; waiting: 1 event day(s) fail-locked")


def test_forget_without_an_id_or_with_an_empty_one_says_what_it_needs(capsys):
    assert cli.main(["forget", "--dry-run"]) == 2
    assert "name at least one user: --domain-userid ID or --user-id ID" in capsys.readouterr().err
    assert cli.main(["forget", "--domain-userid", "", "--dry-run"]) == 2
    assert "--domain-userid needs a non-empty id, got ''" in capsys.readouterr().err


def test_forget_takes_ids_of_both_kinds_repeated():
    args = parse("forget", "--domain-userid", "a", "--domain-userid", "b", "--user-id", "c", "--dry-run")
    assert (args.domain_userid, args.user_id, args.dry_run) == (["a", "b"], ["c"], True)


def test_a_dot_env_in_the_current_directory_applies_as_in_the_ui(tmp_path, monkeypatch, capsys):
    (tmp_path / ".env").write_text("INCREMENTAL_MAX_SESSION_DAYS=0\n# a comment\nOTHER_NAME='x y'\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(os, "environ", {**os.environ, "INCREMENTAL_MAX_SESSION_DAYS": "3"})
    assert cli.main(["limits"]) == 2
    err = capsys.readouterr().err
    assert f"loaded INCREMENTAL_MAX_SESSION_DAYS, OTHER_NAME from {tmp_path / '.env'}" in err
    assert "settings error: max_session_days=0" in err, err
    assert os.environ["OTHER_NAME"] == "x y"
