#!/usr/bin/env python
"""Materialise transformers' own common model tests for tests/test_transformers_common.py.

transformers' `tests/test_modeling_common.py` (ModelTesterMixin) and `tests/test_configuration_common.py`
(ConfigTester) are taken unmodified from the PyPI source distribution of the *installed* transformers version,
checked against the SHA-256 hashes recorded in tests/transformers_common/SOURCES.json, and written with the sdist's
LICENSE to .transformers-tests/<version>/ (git-ignored): the project commits no third-party code.

The sdist lacks three modules those files import (tests/generation/test_utils.py, tests/exporters/test_export.py,
tests/utils/test_configuration_utils.py, which live only in transformers' repository). Stand-ins of our own
(tests/transformers_common/standins/) take their place: GenerationTesterMixin and ExportTesterMixin without tests,
and the common config keywords ConfigTester sets. With --repository pointing at a checkout of transformers at the
installed version's tag, the repository's own modules are used instead, and the generation and export tests run too.

  python scripts/transformers_tests.py                    # what scripts/test.sh runs after installing
  python scripts/transformers_tests.py --repository ~/src/transformers   # the full mixins, from a checkout
  python scripts/transformers_tests.py --record           # record the hashes of a new installed version
"""

import argparse
import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib.metadata import version as installed_version
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "tests" / "transformers_common" / "SOURCES.json"
STANDINS = ROOT / "tests" / "transformers_common" / "standins"
DESTINATION = ROOT / ".transformers-tests"
PACKAGE = "upstream_tests"  # the materialised tests/ folder, importable under this name
REPOSITORY_MODULES = ("generation/test_utils.py", "exporters/test_export.py", "utils/test_configuration_utils.py")
MARKER = "MATERIALISED.json"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def harness_folder(version: str) -> Path:
    """The folder to put on sys.path: it holds the `upstream_tests` package."""
    return DESTINATION / version


def is_materialised(version: str) -> bool:
    return (harness_folder(version) / PACKAGE / MARKER).is_file()


def download_sdist(version: str, folder: Path) -> Path:
    """pip download of the sdist only (no wheel, no dependencies); pip's cache serves a second call."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
               "--dest", str(folder), f"transformers=={version}"]
    result = subprocess.run(command, capture_output=True, text=True)
    archives = list(folder.glob(f"transformers-{version}.tar.gz"))
    if result.returncode or not archives:
        raise SystemExit(f"Could not download the transformers {version} source distribution from PyPI "
                         f"({result.stderr.strip().splitlines()[-1:] or 'no archive'}); the common tests need it "
                         "once (pip's cache keeps it). Check the connection to PyPI.")
    return archives[0]


def read_members(archive: Path, version: str, names) -> dict[str, bytes]:
    prefix = f"transformers-{version}/"
    with tarfile.open(archive) as tar:
        return {name: tar.extractfile(prefix + name).read() for name in names}


def ensure_materialised(version: str) -> Path:
    """materialise() once, also when several test workers (pytest-xdist) import the common tests at the same
    moment: the first takes a lock and writes, the others wait and find it done."""
    DESTINATION.mkdir(exist_ok=True)
    with open(DESTINATION / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not is_materialised(version):
            materialise(version)
    return harness_folder(version)


def materialise(version: str, repository: Path | None = None, record: bool = False) -> Path:
    sources = json.loads(SOURCES.read_text())
    entry = sources["versions"].get(version)
    if entry is None and not record:
        raise SystemExit(f"transformers {version} is installed, but tests/transformers_common/SOURCES.json records "
                         f"the common tests of {', '.join(sources['versions'])} only. Install a recorded version "
                         "(pip install transformers==<version>), or record this one: python "
                         "scripts/transformers_tests.py --record (then run the suite before committing it).")
    with tempfile.TemporaryDirectory() as scratch:
        archive = download_sdist(version, Path(scratch))
        digest = sha256(archive.read_bytes())
        wanted = list(entry["files"]) if entry else ["tests/test_modeling_common.py",
                                                     "tests/test_configuration_common.py", "LICENSE"]
        members = read_members(archive, version, wanted)
    if record:
        entry = {"sdist": archive.name, "sdist_sha256": digest,
                 "files": {name: sha256(data) for name, data in members.items()}}
        sources["versions"][version] = entry
        SOURCES.write_text(json.dumps(sources, indent=2) + "\n")
        print(f"Recorded transformers {version} in {SOURCES.relative_to(ROOT)}.")
    if digest != entry["sdist_sha256"]:
        raise SystemExit(f"The transformers {version} sdist has SHA-256 {digest}, not the recorded "
                         f"{entry['sdist_sha256']}: refusing to run tests from an unexpected archive.")
    for name, data in members.items():
        if entry["files"][name] != sha256(data):
            raise SystemExit(f"{name} in the transformers {version} sdist does not match its recorded hash.")

    package = harness_folder(version) / PACKAGE
    if package.exists():
        shutil.rmtree(package)
    package.mkdir(parents=True)
    for name, data in members.items():
        (package / Path(name).name).write_bytes(data)
    used = {}
    for module in REPOSITORY_MODULES:
        target = package / module
        target.parent.mkdir(exist_ok=True)
        (target.parent / "__init__.py").touch()
        source = repository / "tests" / module if repository else STANDINS / module
        if not source.is_file():
            raise SystemExit(f"{source} is missing: --repository must be a transformers checkout (its tests/ folder).")
        shutil.copyfile(source, target)
        used[module] = f"transformers repository {repository}" if repository else "stand-in (tests/transformers_common)"
    (package / "__init__.py").touch()
    marker = {"transformers": version, "sdist_sha256": digest, "repository_modules": used}
    (package / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    return harness_folder(version)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--version", default=None,
                        help="transformers version whose tests to materialise (default: the installed one, which is "
                             "the only one the tests can run against).")
    parser.add_argument("--repository", type=Path, default=None,
                        help="a transformers checkout at that version's tag: take the generation, export and "
                             "configuration-keyword modules from it instead of the stand-ins.")
    parser.add_argument("--record", action="store_true",
                        help="record the sdist's and the files' hashes for this version in SOURCES.json (a new "
                             "transformers release), then materialise.")
    parser.add_argument("--force", action="store_true", help="materialise again even when it is done already.")
    args = parser.parse_args(argv)
    version = args.version or installed_version("transformers")
    if is_materialised(version) and not (args.force or args.record or args.repository):
        print(f"transformers {version} common tests: already in {harness_folder(version).relative_to(ROOT)}")
        return
    folder = materialise(version, args.repository, args.record)
    print(f"transformers {version} common tests: written to {folder.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
