import pytest


@pytest.fixture(scope="session")
def tfds_dir(tmp_path_factory):
    """One TFDS data dir per session: the offline digits dataset is built once, by the first run."""
    return tmp_path_factory.mktemp("tfds")
