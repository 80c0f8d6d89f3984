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
