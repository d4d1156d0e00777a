"""``secrets``: names in the workload, never values; refusals never echo an env table's values or
a URL's password; the resolution cache is its user's alone whatever the umask."""

from __future__ import annotations

import os
import stat

import pytest

from nodus.errors import WorkloadError, note_url, redacted
from nodus.schemas import defaults
from nodus.schemas.continuation import apply_changes, settings_table
from nodus.schemas.loader import resolve_file
from nodus.schemas.remembered import resolve_remembered
from nodus.schemas.resolved import ResolvedWorkload

BASE = 'name = "w"\ncommand = ["python", "train.py"]\n'


def test_secrets_resolve_to_names_merged_like_env(resolved):
    workload = resolved(
        BASE
        + 'secrets = ["HF_TOKEN", "WANDB_API_KEY"]\n'
        + '[[stages]]\nname = "train"\nsecrets = ["AWS_SECRET_ACCESS_KEY", "HF_TOKEN"]\n'
        + '[[stages]]\nname = "eval"\n'
    )
    train, evaluate = workload.stages
    assert train.secrets == ("HF_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY")
    assert evaluate.secrets == ("HF_TOKEN", "WANDB_API_KEY")
    data = workload.to_dict()
    assert data["stages"][0]["secrets"] == ["HF_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY"]
    assert ResolvedWorkload.from_dict(data) == workload


def test_a_resolution_stored_before_secrets_existed_has_none(resolved):
    data = resolved(BASE).to_dict()
    del data["stages"][0]["secrets"]
    assert ResolvedWorkload.from_dict(data).stages[0].secrets == ()


def test_no_secrets_resolve_to_an_empty_list(resolved):
    assert resolved(BASE).to_dict()["stages"][0]["secrets"] == []


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('secrets = ["a-b"]', "secrets[0]: 'a-b' — not a valid variable name"),
        ('secrets = ["NODUS_X"]', "secrets[0]: 'NODUS_X' — nodus sets this variable"),
        ('secrets = ["TMPDIR"]', "secrets[0]: 'TMPDIR' — nodus sets this variable"),
        ('secrets = ["HF_HOME"]', "secrets[0]: 'HF_HOME' — nodus sets this variable"),
        ('secrets = ["A", "A"]', "secrets: ['A', 'A'] — A listed more than once"),
        ('secrets = "HF_TOKEN"', "secrets: 'HF_TOKEN' — must be a list"),
        ("secrets = [1]", "secrets[0]: 1 — must be a string"),
        (
            'env = { HF_TOKEN = "hf_inline" }\nsecrets = ["HF_TOKEN"]',
            "secrets: 'HF_TOKEN' — 'HF_TOKEN' is also set in env of stage 'main'",
        ),
        (
            'env = { HF_TOKEN = "hf_inline" }\n[[stages]]\nname = "t"\nsecrets = ["HF_TOKEN"]',
            "stages[0].secrets: 'HF_TOKEN' — 'HF_TOKEN' is also set in env of stage 't'",
        ),
        (
            'secrets = ["HF_TOKEN"]\n[[stages]]\nname = "t"\nenv = { HF_TOKEN = "hf_inline" }',
            "secrets: 'HF_TOKEN' — 'HF_TOKEN' is also set in env of stage 't'",
        ),
    ],
)
def test_secret_names_are_checked(refused, text, line):
    problems = refused(BASE + text)
    assert any(line in problem for problem in problems), problems
    assert not any("hf_inline" in problem for problem in problems)


def test_every_bad_secret_is_reported_at_once(refused):
    problems = refused(BASE + 'secrets = ["1X", "NODUS_A", "OK"]\n')
    assert [p.split(":")[0] for p in problems] == ["secrets[0]", "secrets[1]"]


@pytest.mark.parametrize(
    "text",
    [
        'env = { "A B" = "sekrit-value", C = "sekrit-value" }',
        'env = { NODUS_X = "sekrit-value" }',
        'env = { A = 1, B = "sekrit-value" }',
        'env = "HF_TOKEN=sekrit-value"',
        'env = { A = "sekrit\\u0000value" }',
        '[[stages]]\nname = "t"\nenv = { "bad name" = "sekrit-value" }',
        '[[stages]]\nname = "t"\nenv = ["sekrit-value"]',
    ],
)
def test_a_refused_env_table_never_echoes_its_values(write, text):
    path = write(BASE + text)
    with pytest.raises(WorkloadError) as caught:
        resolve_file(path)
    assert "sekrit" not in str(caught.value)
    assert "env" in str(caught.value)


def test_a_refused_env_name_is_still_named(refused):
    (problem,) = refused(BASE + 'env = { "A B" = "sekrit-value" }')
    assert problem == "env: 'A B' is not a valid variable name (letters, digits, '_')"


def test_an_unknown_key_of_ten_megabytes_is_not_echoed_whole(refused):
    key = "k" * (10 * 1024 * 1024)
    (problem,) = refused(BASE + f"{key} = 1\n")
    assert len(problem) < 600
    assert "unknown key" in problem


def test_set_env_on_a_branch_never_echoes_its_value_nor_sets_a_secret(resolved):
    with pytest.raises(WorkloadError) as caught:
        settings_table([("env.A", "sekrit-1"), ("env.A", "sekrit-2")])
    assert "sekrit" not in str(caught.value)
    parent = resolved(BASE + 'secrets = ["HF_TOKEN"]\n').to_dict()
    with pytest.raises(WorkloadError) as caught:
        apply_changes(parent, settings_table([("env.HF_TOKEN", "sekrit-3")]))
    assert "--set env.HF_TOKEN: is a secret of this run" in str(caught.value)
    assert "sekrit" not in str(caught.value)
    child = apply_changes(parent, settings_table([("env.OTHER", "fine")]))
    assert child["stages"][0]["secrets"] == ["HF_TOKEN"]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("store s3://alice:pw@bucket/x failed", "store s3://alice:***@bucket/x failed"),
        ("ftp://bob:p@ss:w@host:21/store", "ftp://bob:***@host:21/store"),
        ("'https://u:secret@h/p'", "'https://u:***@h/p'"),
        ('{"error": "gs://u:secret@b/p"}', '{"error": "gs://u:***@b/p"}'),
        ("s3://bucket/prefix", "s3://bucket/prefix"),
        ("sftp://alice@host/x", "sftp://alice@host/x"),  # a user name is no password
        ("no URL here: a:b@c", "no URL here: a:b@c"),
    ],
)
def test_a_urls_password_is_masked(text, shown):
    assert redacted(text) == shown


def test_a_noted_urls_password_is_masked_where_a_client_quotes_it_alone():
    note_url("s3://carol:Zq%2F9-noted@bucket/runs")
    text = 'Invalid bucket name "carol:Zq/9-noted@bucket" (Zq%2F9-noted)'
    assert "noted" not in redacted(text)


def test_the_resolution_cache_and_a_new_home_are_private_whatever_the_umask(tmp_path):
    (tmp_path / "code").mkdir()
    workload = tmp_path / "code" / "nodus.toml"
    workload.write_text(BASE + 'secrets = ["HF_TOKEN"]\n')
    home = tmp_path / "home"
    before = os.umask(0o022)
    try:
        resolve_remembered(str(workload), None, str(home))
    finally:
        os.umask(before)
    cache = home / defaults.RESOLVED_DIR
    (entry,) = list(cache.iterdir())
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    for folder in (cache, *cache.parents):
        if folder == home:
            break
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert b'"HF_TOKEN"' in entry.read_bytes()


def test_a_umask_that_takes_the_owners_bits_cannot_lock_nodus_out(tmp_path):
    """The modes are set explicitly: a umask can only take bits away from mkdir and open."""
    from nodus._atomic import private_folder, write_json_atomic

    before = os.umask(0o277)
    try:
        private_folder(str(tmp_path / "a" / "b"))
        write_json_atomic(str(tmp_path / "a" / "b" / "x.json"), {"k": 1})
    finally:
        os.umask(before)
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a" / "b" / "x.json").stat().st_mode) == 0o600
