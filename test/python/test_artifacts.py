"""coat.artifacts: one finder and one cache for compiled kernels. Programs
are found by their source key, so a configuration never runs kernels
compiled for another; a folder that does not load is an error naming it."""

import json
import os
import shutil

import pytest

import coat
from coat import artifacts, programs, toolchain
from coat.optim import FP8AdamW

TINY = (64, 160)


@pytest.fixture
def block_artifact(cpu_cache, tmp_path):
    """The TINY MLP block's program, compiled for the CPU into its own folder."""
    cfg = programs.MLPBlockConfig(*TINY, eps=1e-5)
    out = tmp_path / "block"
    out.mkdir()
    src = out / f"{cfg.name}.mlir"
    src.write_text(cfg.text())
    toolchain.Toolchain().compile_program(src, out, gpu=False)
    return cfg, out


def test_a_module_is_loaded_once_until_its_manifest_changes(block_artifact):
    _, out = block_artifact
    first = artifacts.module(out)
    assert artifacts.module(str(out)) is first
    assert artifacts.module(out / "manifest.json") is first
    doc = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps(doc, indent=1))
    assert artifacts.module(out) is not first


def test_the_artifact_records_the_key_of_what_was_compiled(block_artifact):
    cfg, out = block_artifact
    doc = json.loads((out / "manifest.json").read_text())
    assert doc["source_key"] == toolchain.source_key(cfg.text(), gpu=False)


def test_a_folder_is_taken_for_its_text_not_its_options(block_artifact, monkeypatch):
    # Compiled with gpu=False, not the default options: found when given,
    # never on the search path.
    cfg, out = block_artifact
    assert artifacts.program(cfg, str(out)).module.directory == str(out)
    monkeypatch.setenv("COAT_KERNELS", str(out))
    monkeypatch.setenv("COAT_KERNELS_ONLY", "1")
    assert artifacts._find(toolchain.source_key(cfg.text())) is None
    other = programs.MLPBlockConfig(*TINY, eps=1e-6)
    assert other.name == cfg.name
    with pytest.raises(artifacts.ArtifactNotFound, match="another program text"):
        artifacts.program(other, str(out))


def test_kernels_of_another_compiler_are_named_when_none_fit(block_artifact, monkeypatch):
    """Kernels carried from an older compiler are passed over (their key's
    second half differs); with no coat-opt to compile, the error names the
    folder that holds the program's text so the cause is not a guess."""
    cfg, out = block_artifact
    monkeypatch.setenv("COAT_KERNELS", str(out))
    monkeypatch.setenv("COAT_KERNELS_ONLY", "1")
    monkeypatch.setenv("COAT_KERNEL_CACHE", str(out.parent / "empty-cache"))
    monkeypatch.setattr(artifacts._paths, "find_coat_opt", lambda: None)
    monkeypatch.setattr(artifacts, "_programs", {})  # nothing found earlier in this process
    with pytest.raises(artifacts.ArtifactNotFound,
                       match="holds this program's text but was compiled by another"):
        artifacts.program(cfg)
    other = programs.MLPBlockConfig(*TINY, eps=1e-6)  # another text: no such hint
    with pytest.raises(artifacts.ArtifactNotFound) as e:
        artifacts.program(other)
    assert "holds this program's text" not in str(e.value)


def test_check_kernels_names_the_folders_the_finder_would_pass_over(block_artifact, tmp_path,
                                                                      capsys):
    """`coat check-kernels` (run before the GPU suite): a module compiled
    with other options or by another compiler, or recording no key, is
    named and fails the check; one compiled by this compiler with the
    default options passes, program or not."""
    from coat import cli

    _, out = block_artifact  # compiled with gpu=False: not the default options
    folder = tmp_path / "kernels"
    for name, key in (("current", toolchain.source_key("text")),
                      ("current_kernels", toolchain.source_key("text", program=False)),
                      ("older", toolchain.source_key("text").split("-")[0] + "-" + "0" * 32),
                      ("keyless", None), ("truncated", "")):
        (folder / name).mkdir(parents=True)
        doc = {"format": "coat-manifest", "version": 1, "kernels": []}
        if key:
            doc["source_key"] = key
        text = json.dumps(doc)
        (folder / name / "manifest.json").write_text(text[:-5] if name == "truncated" else text)
    found = dict(artifacts.compiled_by_another_compiler([str(folder), str(out)]))
    assert sorted(os.path.basename(os.path.dirname(p)) for p in found) == \
        ["block", "keyless", "older", "truncated"]
    assert found[str(folder / "keyless" / "manifest.json")] == "no source_key"
    assert found[str(folder / "truncated" / "manifest.json")].startswith("unreadable manifest")

    assert cli.main(["check-kernels", str(folder / "current"), str(folder / "current_kernels")]) == 0
    assert "2 compiled modules, all by this package's compiler" in capsys.readouterr().out
    assert cli.main(["check-kernels", str(folder)]) == 1
    err = capsys.readouterr().err
    assert "3 of 5 compiled modules were not compiled by this package's compiler" in err
    assert str(folder / "older" / "manifest.json") in err
    assert cli.main(["check-kernels", str(tmp_path / "nothing")]) == 1
    assert "no manifest.json" in capsys.readouterr().err


def test_another_epsilon_gets_its_own_kernels(cpu_cache):
    # Same name (hidden and ffn), other text: found by key, never shared.
    a = programs.MLPBlockConfig(*TINY, eps=1e-5)
    b = programs.MLPBlockConfig(*TINY, eps=1e-6)
    assert a.name == b.name and a.text() != b.text()
    pa, pb = artifacts.program(a), artifacts.program(b)
    assert pa.module.directory != pb.module.directory
    assert artifacts.program(a) is pa
    for cfg, prog in ((a, pa), (b, pb)):
        assert prog.module.manifest.raw["source_key"] == toolchain.source_key(cfg.text())


def test_a_broken_folder_on_the_search_path_is_an_error(tmp_path, monkeypatch):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "manifest.json").write_text('{"format": "coat-manifest", "version": 1')
    monkeypatch.setenv("COAT_KERNELS", str(bad))
    monkeypatch.setenv("COAT_KERNELS_ONLY", "1")
    assert artifacts.search_path() == [str(bad)]
    with pytest.raises(coat.ManifestError, match=str(bad)):
        artifacts.modules()
    import torch

    with pytest.raises(coat.ManifestError, match=str(bad)):
        FP8AdamW([torch.nn.Parameter(torch.zeros(256))]).kernel_for("f32", "cpu")
    from coat.linear import find_kernel

    with pytest.raises(coat.ManifestError, match=str(bad)):
        find_kernel("e4m3", "e4m3", "bf16", False)


def test_a_folder_of_artifacts_stands_for_its_subfolders(block_artifact, tmp_path, monkeypatch):
    _, out = block_artifact
    parent = tmp_path / "many"
    shutil.copytree(out, parent / "one")
    (parent / "empty").mkdir()
    monkeypatch.setenv("COAT_KERNELS", str(parent))
    monkeypatch.setenv("COAT_KERNELS_ONLY", "1")
    assert artifacts.search_path() == [os.path.join(str(parent), "one")]
    assert [m.directory for m in artifacts.modules()] == [os.path.join(str(parent), "one")]


def _fake_compiler(monkeypatch, built, during=None):
    """coat-opt stood in for by copying the compiled folder ``built``;
    ``during(work)`` runs before the copy (what another process does
    meanwhile)."""

    def compile_program(self, src, out, **options):
        if during is not None:
            during(out)
        for f in os.listdir(built):
            shutil.copy(os.path.join(built, f), os.path.join(out, f))

    monkeypatch.setattr(toolchain.Toolchain, "compile_program", compile_program)
    monkeypatch.setattr(artifacts._paths, "find_coat_opt", lambda: "coat-opt")


def test_a_cache_compile_moves_its_folder_into_place_whole(block_artifact, tmp_path,
                                                           monkeypatch):
    # The ranks of a distributed job compile the same program at once: each
    # writes a folder of its own, and the cache folder appears complete.
    cfg, built = block_artifact
    monkeypatch.setenv("COAT_KERNEL_CACHE", str(tmp_path / "cache"))
    key = toolchain.source_key(cfg.text())
    seen = []
    _fake_compiler(monkeypatch, built, during=lambda work: seen.append(
        (str(work) != artifacts._cache_folder(key),
         os.path.exists(artifacts._cache_folder(key)))))
    m = artifacts._compile(cfg, cfg.text(), key)
    assert seen == [(True, False)]
    assert m.directory == artifacts._cache_folder(key)
    assert os.listdir(tmp_path / "cache") == [key]
    assert (tmp_path / "cache" / key / f"{cfg.name}.mlir").read_text() == cfg.text()


def test_a_cache_compile_keeps_the_folder_another_process_finished(block_artifact, tmp_path,
                                                                   monkeypatch):
    cfg, built = block_artifact
    monkeypatch.setenv("COAT_KERNEL_CACHE", str(tmp_path / "cache"))
    key = toolchain.source_key(cfg.text())
    final = artifacts._cache_folder(key)

    def other_process_finishes(work):
        shutil.copytree(built, final)
        (tmp_path / "cache" / key / "theirs").write_text("")

    _fake_compiler(monkeypatch, built, during=other_process_finishes)
    m = artifacts._compile(cfg, cfg.text(), key)
    assert m.directory == final and os.path.exists(os.path.join(final, "theirs"))
    assert os.listdir(tmp_path / "cache") == [key]  # no working folder left behind


def test_a_cache_compile_replaces_a_half_written_folder(block_artifact, tmp_path, monkeypatch):
    cfg, built = block_artifact
    monkeypatch.setenv("COAT_KERNEL_CACHE", str(tmp_path / "cache"))
    key = toolchain.source_key(cfg.text())
    stale = tmp_path / "cache" / key
    stale.mkdir(parents=True)
    (stale / "coat_cpu.ll").write_text("interrupted")  # no manifest.json
    _fake_compiler(monkeypatch, built)
    m = artifacts._compile(cfg, cfg.text(), key)
    assert m.directory == str(stale)
    assert (stale / "manifest.json").is_file() and not (stale / "coat_cpu.ll").exists()
    assert os.listdir(tmp_path / "cache") == [key]
