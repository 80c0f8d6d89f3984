"""Whole matches (docs/concepts/trust.md): every name/key pattern matches the whole value (a
trailing newline is not a name), NUL is refused in every string of a spec, the reserved-name
check sees the name itself, and slurm's own options are recognised as sbatch/srun parse them."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.backends.slurm.options import OWN_OPTIONS, own_option
from launcher.errors import SpecError
from launcher.loader.load import parse_spec
from launcher.spec.model.base import ENV_RE, IMAGE_RE, NAME_RE

BASE = "name: {name}\nstrategy: multi_worker_mirrored\nentrypoint: python x.py\ntasks: {{worker: 2}}\n"
SUFFIXES = st.sampled_from(["\n", "\r", "\x00", "\x1b[2J", " ", "/..", "\u2028", "\t"])
GOOD_NAME = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,40}", fullmatch=True)
GOOD_ENV = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,30}", fullmatch=True)


def _quoted(text: str) -> str:
    """``text`` as a YAML double-quoted scalar (every character escaped that must be)."""
    import json

    return json.dumps(text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(GOOD_NAME, SUFFIXES)
def test_a_run_name_with_anything_after_it_is_refused(name, suffix):
    assert NAME_RE.fullmatch(name)
    assert not NAME_RE.fullmatch(name + suffix)
    with pytest.raises(SpecError) as err:
        parse_spec(BASE.format(name=_quoted(name + suffix)))
    line = err.value.lines[0]
    assert "name" in line and "\n" not in line and "\x1b" not in line


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(GOOD_ENV, SUFFIXES)
def test_an_env_key_with_anything_after_it_is_refused(key, suffix):
    assert ENV_RE.fullmatch(key) and not ENV_RE.fullmatch(key + suffix)
    with pytest.raises(SpecError) as err:
        parse_spec(BASE.format(name="t") + f"env: {{{_quoted(key + suffix)}: x}}\n")
    assert any("env" in line for line in err.value.lines), err.value.lines


@pytest.mark.parametrize("key", ["TF_CONFIG\n", "TF_CONFIG\x00", "TFCLUSTER_TASK\n", " TF_CONFIG"])
def test_a_reserved_name_with_a_tail_is_not_a_way_around_the_reserved_check(key):
    with pytest.raises(SpecError):
        parse_spec(BASE.format(name="t") + f"env: {{{_quoted(key)}: x}}\n")


@settings(max_examples=40, deadline=None)
@given(st.from_regex(r"[a-z0-9][a-z0-9._/:@-]{0,30}", fullmatch=True), st.sampled_from(["\n", "\x00", " ", "\x1b"]))
def test_an_image_with_anything_after_it_is_refused(image, suffix):
    assert IMAGE_RE.fullmatch(image) and not IMAGE_RE.fullmatch(image + suffix)


# Every string field a NUL can be planted in (a key or a value), each refused in one line naming it.
NUL_PLACES = [
    'run_dir: "runs\\0x"',
    'workdir: "w\\0"',
    'env: {A: "x\\0y"}',
    'backend: docker\ndocker: {image: x, volumes: ["a\\0:/b"]}',
    'backend: docker\ndocker: {image: x, user: "u\\0"}',
    'backend: ssh\nhosts: [{name: h1, ssh: "me@h\\0"}, {name: h2}]',
    'state: {dir: "d\\0"}',
    'backend: slurm\nslurm: {sbatch: ["--gres=gpu\\0"]}',
]


@pytest.mark.parametrize("extra", NUL_PLACES)
def test_nul_is_refused_in_every_string_field(extra):
    with pytest.raises(SpecError) as err:
        parse_spec(BASE.format(name="t") + extra + "\n")
    assert any("NUL" in line or "\\x00" in line for line in err.value.lines), err.value.lines
    assert all("\x00" not in line for line in err.value.lines)


# How sbatch/srun (getopt_long) would read each, and the option of tfcluster's own it sets.
SLURM_OWN = [
    ("--output=x", "--output"), ("--outp=x", "--output"), ("--o", "--output"), ("-o", "--output"),
    ("-ox", "--output"), ("-vo", "--output"), ("--expor=ALL", "--export"), ("--export", "--export"),
    ("-N2", "--nodes"), ("--node", "--nodelist"), ("-w", "--nodelist"), ("--job", "--jobid"),
    ("-J", "--job-name"), ("--chd=/", "--chdir"), ("-D/tmp", "--chdir"), ("--wr=x", "--wrap"), ("-i", "--input"),
]


@pytest.mark.parametrize("item, own", SLURM_OWN)
def test_slurm_own_options_are_recognised_as_sbatch_parses_them(item, own):
    assert own_option(item)[0] == own
    with pytest.raises(SpecError) as err:
        parse_spec(BASE.format(name="t") + f"backend: slurm\nslurm: {{sbatch: [{_quoted(item)}]}}\n")
    assert own in err.value.lines[0]


@pytest.mark.parametrize("items", [["--gres=gpu:4"], ["--gres", "gpu:4"], ["--exclusive"], ["-p", "debug"],
                                   ["--mem=0"], ["--ntasks-per-gpu=1"], ["-px"], ["--no-requeue"]])
def test_other_options_pass_in_both_forms(items):
    parse_spec(BASE.format(name="t") + f"backend: slurm\nslurm: {{sbatch: {items!r}, srun: {items!r}}}\n".replace("'", '"'))


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(OWN_OPTIONS), st.integers(min_value=2), st.sampled_from(["", "=x"]))
def test_every_prefix_of_an_own_option_is_refused(own, cut, value):
    prefix = own[:max(3, min(cut, len(own)))]
    assert own_option(prefix + value)[0] is not None
