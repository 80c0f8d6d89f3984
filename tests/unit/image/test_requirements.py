"""The worker image's requirements.txt (launcher/image/): the dependency layer is cached by its
bytes, so the same pyproject.toml must give the same text whatever tool wrote the installed
metadata. An editable install and a wheel built by another setuptools differ in how they write a
name (``importlib_resources`` / ``importlib-resources``) and, across versions, the order of a
requirement's specifiers: the image built from a wheel then reinstalled TensorFlow (140 s, seen in
tests/integration/docker/test_docker_image_from_wheel.py) although nothing it installs changed."""

from __future__ import annotations

import pytest

from launcher import image

# One pyproject.toml's [tf] extra as two builds' METADATA listed it (Requires-Dist lines).
EDITABLE = ['pydantic<3,>=2.7', 'importlib_resources; extra == "tf"', 'tf-keras<2.22,>=2.16; extra == "tf"',
            'tensorflow-datasets>=4.9; extra == "tf"', 'pytest>=8; extra == "test"',
            'uvloop; sys_platform != "win32" and extra == "tf"']
WHEEL = ['pydantic>=2.7,<3', 'importlib-resources; extra == "tf"', 'tf_keras <2.22, >=2.16 ; extra == "tf"',
         'Tensorflow.Datasets>=4.9; extra == "tf"', 'pytest>=8; extra == "test"',
         'uvloop; sys_platform != "win32" and extra == "tf"']


def _requirements(monkeypatch, listed: list[str]) -> list[str]:
    monkeypatch.setattr(image.metadata, "requires", lambda name: listed)
    return image.requirements()


def test_two_writings_of_the_same_requirements_give_the_same_requirements_txt(monkeypatch):
    editable = _requirements(monkeypatch, EDITABLE)
    assert editable == _requirements(monkeypatch, WHEEL)
    assert editable == ["pydantic<3,>=2.7", "importlib-resources", "tf-keras<2.22,>=2.16", "tensorflow-datasets>=4.9",
                        'uvloop; sys_platform != "win32"']  # (the [test] extra's left out, other markers kept)


@pytest.mark.parametrize("written, expected", [
    ("Foo.Bar[B_x,a] (>=1)", "foo-bar[a,b-x]>=1"),  # the old metadata form, extras sorted
    ("pkg @ https://example.com/pkg-1.0-py3-none-any.whl", "pkg @ https://example.com/pkg-1.0-py3-none-any.whl"),
    ("numpy", "numpy"),
    ("not a requirement at all!", "not a requirement at all!"),  # (kept as written: pip says what is wrong)
])
def test_one_requirement_is_written_one_way(written, expected):
    assert image.canonical(written) == expected
