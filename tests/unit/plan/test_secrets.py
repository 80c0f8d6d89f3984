"""What tfcluster masks: a variable is a secret by its name or by its value (``is_secret``)."""

from __future__ import annotations

import pytest

from launcher.plan.build import MASK, is_secret, redact_env

SECRET_VALUES = [
    "postgres://app:pw@db.example:5432/app",
    "redis://:hunter2@cache:6379/0",
    "https://user:p%40ss@git.example.com/repo.git",
    "ghp_" + "a1B2" * 9,
    "gho_" + "Z9y8" * 9,
    "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "hf_" + "AbCdEfGhIj" * 3 + "kl",
    "AKIAIOSFODNN7EXAMPLE",
    "ASIAIOSFODNN7EXAMPLE",
    "xoxb-123456789012-abcdefghijkl",
    "xoxp-1-2-3-abcdefabcdef",
    "sk-" + "proj_" + "x" * 40,
    "glpat-" + "abcdEFGH1234ijklMNOP",
    "AIza" + "SyA-" + "b" * 31,
    "-----BEGIN RSA PRIVATE KEY-----\nMIIE...",
    "-----BEGIN OPENSSH PRIVATE KEY-----",
    "-----BEGIN PRIVATE KEY-----",
    "Bearer ghp_" + "q" * 36,  # (a token inside a longer value)
]
PLAIN_VALUES = [
    "", "0.5", "hello", "/usr/local/lib:/opt/lib", "https://example.com/data", "gs://bucket/path",
    "grpc://host:2222", "http://user@host/", "user@host:22", "sk-learn", "hf_home", "ghp_", "ask-me",
    "AKIA", "scikit-learn", "-----BEGIN CERTIFICATE-----", "xoxo", "mask-" + "x" * 30,
]


@pytest.mark.parametrize("value", SECRET_VALUES)
def test_a_secret_value_is_secret_whatever_its_name(value):
    assert is_secret("DATABASE_URL", value)
    assert is_secret("X", value)


@pytest.mark.parametrize("value", PLAIN_VALUES)
def test_a_plain_value_under_a_plain_name_is_not(value):
    assert not is_secret("DATA_DIR", value)


@pytest.mark.parametrize("name", ["API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "MYSQL_PWD_PASSWD",
                                  "GOOGLE_APPLICATION_CREDENTIALS", "HF_AUTH", "BASIC_AUTH_HEADER", "GITHUB_PAT",
                                  "PAT", "SSH_PRIVATE", "DB_PASS", "wandb_api_key"])
def test_a_secret_name_is_secret_with_any_value(name):
    assert is_secret(name) and is_secret(name, "hello")


@pytest.mark.parametrize("name", ["PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "PATIENCE", "LR", "PASSES", "COMPASS",
                                  "TF_CONFIG", "CUDA_VISIBLE_DEVICES", "PWD", "HOME"])
def test_a_plain_name_is_not(name):
    assert not is_secret(name) and not is_secret(name, "1")


def test_redact_env_masks_by_name_and_by_value_and_keeps_the_rest():
    env = {"DATABASE_URL": "postgres://app:pw@db/app", "GITHUB_PAT": "x", "LR": "0.5",
           "HF_HOME": "/data/hf", "NOTE": "hf_" + "a" * 34}
    assert redact_env(env) == {"DATABASE_URL": MASK, "GITHUB_PAT": MASK, "LR": "0.5", "HF_HOME": "/data/hf",
                               "NOTE": MASK}


# ------------------------------------------------------------------ a command's arguments

from launcher.plan.build import redact_command  # noqa: E402
from launcher.remote.masking import mask_argv, masked_args, secret_option  # noqa: E402

TOKEN = "hf_" + "AbCdEfGhIj" * 3 + "kl"
SECRET_ARGS = [
    (["--token", "abc123"], ["--token", MASK]),
    (["--token=abc123"], ["--token=" + MASK]),
    (["--hub-token", TOKEN], ["--hub-token", MASK]),
    (["--hub_token", "x"], ["--hub_token", MASK]),
    (["-token", "x"], ["-token", MASK]),
    (["--api-key", "k"], ["--api-key", MASK]),
    (["--apikey=k"], ["--apikey=" + MASK]),
    (["--password", "1234"], ["--password", MASK]),  # (a number, under a secret's name)
    (["--db-pass", "x"], ["--db-pass", MASK]),
    (["--credentials", "x"], ["--credentials", MASK]),
    (["--client-secret=s"], ["--client-secret=" + MASK]),
    (["--db", "postgres://bob:hunter2@db:5432/app"], ["--db", "postgres://bob:***@db:5432/app"]),
    (["https://user:p%40ss@git.example.com/repo.git"], ["https://user:***@git.example.com/repo.git"]),
    (["HF_TOKEN=abc"], ["HF_TOKEN=" + MASK]),
    (["db.password=pw"], ["db.password=" + MASK]),
    (["trainer.wandb_api_key=k"], ["trainer.wandb_api_key=" + MASK]),
    ([TOKEN], [MASK]),
    (["ghp_" + "a1B2" * 9], [MASK]),
    (["AKIAIOSFODNN7EXAMPLE"], [MASK]),
    (["xoxb-123456789012-abcdefghijkl"], [MASK]),
    (["sk-" + "proj_" + "x" * 40], [MASK]),
    (["--note=Bearer " + TOKEN], ["--note=Bearer " + MASK]),
    (["sh", "-c", f"python t.py --token abc --lr 0.1 HF_TOKEN={TOKEN} --password='p w'"],
     ["sh", "-c", "python t.py --token *** --lr 0.1 HF_TOKEN=*** --password='***'"]),
    (["srun", "--export=ALL,HF_TOKEN=abc", "python"], ["srun", "--export=ALL,HF_TOKEN=" + MASK, "python"]),
    # Values inside values, and a command line whichever word its option is (a word and its next
    # are not read as a pair: ``train.py --hf-token X`` once leaked, ``x train.py --hf-token X`` not).
    (["--wrapper-args=--hf-token=abc"], ["--wrapper-args=--hf-token=" + MASK]),
    (["--a=--b=--password=x"], ["--a=--b=--password=" + MASK]),
    (["--extra=--token x"], ["--extra=--token " + MASK]),
    (["--extra='--token x y'"], ["--extra='--token *** y'"]),
    (["--env=A=1,DB_PASSWORD=x"], ["--env=A=1,DB_PASSWORD=" + MASK]),
    (["sh", "-c", "train.py --hf-token abc --x 1"], ["sh", "-c", "train.py --hf-token *** --x 1"]),
    (["sh", "-c", "train --x=--api-key=zz; echo done"], ["sh", "-c", "train --x=--api-key=***; echo done"]),
    (["--token", "a,b"], ["--token", MASK]),
    # Nested past what is read (a hostile spec's): the rest is masked, not shown, and costs little.
    (["--x=" + "a=" * 5000 + "b"], ["--x=" + "a=" * 8 + MASK]),
]
PLAIN_ARGS = [
    ["--epochs", "3"], ["--lr=0.1"], ["--data", "/data/train"], ["--data-dir=/data/x"], ["--model-dir", "gs://b/m"],
    ["--max-tokens", "512"], ["--tokenizer", "bert-base-uncased"], ["--keyword", "foo"], ["--passes", "2"],
    ["--token-file", "/run/secrets/hf"], ["--key-path=/home/u/.ssh/id"], ["--key-size", "2048"],
    ["--auth-type", "basic"], ["--use-auth-token", "--epochs", "3"], ["LR=0.5"], ["max_tokens=512"],
    ["https://example.com/data"], ["grpc://host:2222"], ["user@host:22"], ["sk-learn"], ["hf_home"],
    ["python", "-m", "worker", "--steps", "100"], ["sh", "-c", "python t.py --lr 0.1 --data /d"],
]


@pytest.mark.parametrize("argv,masked", SECRET_ARGS)
def test_a_secret_argument_is_masked_in_each_spelling(argv, masked):
    assert mask_argv(["python", "t.py", *argv]) == ["python", "t.py", *masked]
    assert redact_command(tuple(argv)) == masked
    assert masked_args(argv)  # (the warning names it)


@pytest.mark.parametrize("argv", PLAIN_ARGS)
def test_an_ordinary_argument_is_shown_as_it_is(argv):
    assert mask_argv(argv) == argv and masked_args(argv) == []


def test_option_names_go_by_words_and_a_file_of_the_secret_is_not_one():
    assert all(secret_option(n) for n in ("token", "hub-token", "HF_TOKEN", "apikey", "db.password", "pat", "pass"))
    assert not any(secret_option(n) for n in ("tokens", "tokenizer", "keyword", "passes", "path", "token-file",
                                              "secret_name", "key_size", "compass"))


def test_the_warning_names_the_arguments_masked():
    found = masked_args(["python", "t.py", "--hub-token", TOKEN, "--db", "postgres://bob:hunter2@db/app", TOKEN])
    assert found == ["--hub-token ***", "postgres://bob:***@db/app", "argument 6 (hf_...)"]
    assert not any(TOKEN in f or "hunter2" in f for f in found)
