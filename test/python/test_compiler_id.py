"""The compiler's identity in artifact keys (scripts/compiler_id.py)."""

import importlib.util
import os
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _script():
    spec = importlib.util.spec_from_file_location(
        "compiler_id", os.path.join(ROOT, "scripts", "compiler_id.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_recorded_id_is_the_sources_hash():
    """A change to the compiler's sources must come with a new recorded id,
    or artifacts compiled before it keep their keys."""
    from coat._compiler_id import COMPILER_ID

    ids = _script()
    assert COMPILER_ID == ids.compute(), (
        "the compiler's sources changed since python/coat/_compiler_id.py was written: "
        "run scripts/compiler_id.py --write")


def test_id_follows_compiler_sources_not_the_runtime(tmp_path):
    ids = _script()
    for top in ("include/coat", "lib", "tools/coat-opt"):
        shutil.copytree(os.path.join(ROOT, top), tmp_path / top)
    files = ids.source_files(str(tmp_path))
    assert "lib/Transforms/RecomputeActivations.cpp" in files
    assert not any(f.startswith(("lib/Runtime/", "include/coat/Runtime/")) for f in files)
    base = ids.compute(str(tmp_path))
    with open(tmp_path / "lib/Runtime/Runtime.cpp", "a") as f:
        f.write("// runtime only\n")
    assert ids.compute(str(tmp_path)) == base
    with open(tmp_path / "lib/Transforms/RecomputeActivations.cpp", "a") as f:
        f.write("// a lowering changed\n")
    assert ids.compute(str(tmp_path)) != base


def test_source_key_changes_with_the_compiler(monkeypatch):
    from coat import toolchain

    before = toolchain.source_key("text")
    monkeypatch.setattr(toolchain, "COMPILER_ID", "0" * 32)
    after = toolchain.source_key("text")
    assert before.split("-")[0] == after.split("-")[0]  # the same text
    assert before != after


def test_check_reports_a_stale_record_and_write_renews_it(tmp_path, monkeypatch, capsys):
    ids = _script()
    record = tmp_path / "_compiler_id.py"
    # as a merge of two branches that both changed the compiler leaves it
    record.write_text('"""doc"""\n\n<<<<<<< HEAD\nCOMPILER_ID = "00"\n=======\n'
                      'COMPILER_ID = "11"\n>>>>>>> other\n')
    monkeypatch.setattr(ids, "RECORD", str(record))
    assert ids.main(["--check"]) == 1
    assert "run scripts/compiler_id.py --write" in capsys.readouterr().err
    assert ids.main(["--write"]) == 0
    assert record.read_text() == ids.RECORD_TEXT.format(ident=ids.compute())
    assert ids.main(["--check"]) == 0
    with open(os.path.join(ROOT, "python", "coat", "_compiler_id.py")) as f:
        assert f.read() == ids.RECORD_TEXT.format(ident=ids.compute())
