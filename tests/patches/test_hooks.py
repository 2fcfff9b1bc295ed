"""The hook table against the pinned SGLang wheel (ast only), and the start-up check against
stand-in packages: every hook point exists with its signature, and anything else is refused."""

from __future__ import annotations

import glob
import os
import zipfile

import pytest

from patches import hooks, hooks_installed, hooks_source
from tests.patches import fake_sglang

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WHEEL_GLOB = os.path.join(ROOT, ".cache", "sglang", f"sglang-{hooks.SGLANG_VERSION}-*.whl")


@pytest.fixture(scope="module")
def wheel() -> str:
    found = sorted(glob.glob(os.environ.get("HSX_SGLANG_WHEEL") or WHEEL_GLOB))
    if not found:
        if os.environ.get("HSX_REQUIRE_SGLANG_WHEEL"):  # CI downloads it: missing is a failure there
            pytest.fail(f"SGLang wheel missing under {WHEEL_GLOB}")
        pytest.skip(
            f"SGLang wheel not downloaded: .ci/run fetches it with "
            f"`pip download --no-deps sglang=={hooks.SGLANG_VERSION} -d .cache/sglang`"
        )
    return found[0]


@pytest.fixture(scope="module")
def sources(wheel, tmp_path_factory) -> str:
    """The wheel's files the table names, unpacked so a test can alter one."""
    root = str(tmp_path_factory.mktemp("sglang-src"))
    wanted = {h.module.replace(".", "/") for h in hooks.HOOKS}
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            stem = name.removesuffix(".py").removesuffix("/__init__")
            if stem in wanted or name.startswith(hooks._FLAG_FIELDS_DIR) or name == "sglang/_version.py":
                z.extract(name, root)
    return root


def test_pinned_wheel_has_every_hook(wheel):
    assert hooks_source.SourceTree(wheel).version() == hooks.SGLANG_VERSION
    assert hooks_source.check_sources(wheel) == []


def _edit(root: str, rel: str, old: str, new: str) -> None:
    path = os.path.join(root, rel)
    with open(path) as f:
        text = f.read()
    assert old in text, f"{old!r} not in {rel}"
    with open(path, "w") as f:
        f.write(text.replace(old, new))


def test_source_check_catches_moved_hooks(sources, tmp_path):
    import shutil

    assert hooks_source.check_sources(sources) == []
    tree = str(tmp_path / "t")
    shutil.copytree(sources, tree)
    brp = "sglang/srt/managers/scheduler_components/batch_result_processor.py"
    _edit(
        tree,
        brp,
        "        extend_input_len: int,\n        store: bool = True,",
        "        extend_input_len: int,\n        keep: bool = True,",
    )
    _edit(tree, "sglang/_version.py", "'0.5.23'", "'0.5.24'")
    _edit(
        tree,
        "sglang/srt/arg_groups/fields/memory.py",
        "    disable_radix_cache: A[",
        "    radix_cache_off: A[",
    )
    _edit(tree, "sglang/srt/managers/schedule_batch.py", "self.inflight_middle_chunks = 0", "self.chunks = 0")
    problems = "\n".join(hooks_source.check_sources(tree))
    assert "SGLang version is '0.5.24'; this patch is written for 0.5.23 only" in problems
    assert "_append_prefill_hidden_states has parameters" in problems and "'keep'" in problems
    assert "server flag --disable-radix-cache (disable_radix_cache) is missing" in problems
    assert "Req.inflight_middle_chunks is missing" in problems


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """Write a stand-in sglang, put it first on sys.path, forget it afterwards."""

    def make(**kw) -> str:
        fake_sglang.forget()
        root = fake_sglang.write_tree(str(tmp_path / f"fake{len(os.listdir(tmp_path))}"), **kw)
        monkeypatch.syspath_prepend(root)
        return root

    yield make
    fake_sglang.forget()


def test_installed_check_passes_on_matching_tree(fake):
    fake()
    assert hooks_installed.check_installed() == []
    hooks_installed.require_installed()


def test_wrong_version_is_refused(fake):
    fake(version="0.5.22")
    with pytest.raises(hooks.IncompatibleSGLang) as e:
        hooks_installed.require_installed()
    msg = str(e.value)
    assert "refusing to start" in msg and "SGLang version is '0.5.22'" in msg and "sglang==0.5.23" in msg


def test_missing_or_changed_hook_is_refused(fake):
    fake(
        drop="GenerationBatchResult.copy_to_cpu",
        change={"run_scheduler_process": ("server_args", "port_args", "gpu_id", "tp_rank", "pipe_writer")},
    )
    problems = hooks_installed.check_installed()
    assert any("managers.utils.GenerationBatchResult.copy_to_cpu is missing" in p for p in problems)
    assert any("run_scheduler_process has parameters" in p for p in problems)
    assert len(problems) == 2


def test_missing_flag_and_attribute_are_refused(fake):
    fake(drop="disable_radix_cache")
    assert hooks_installed.check_installed() == [
        "server flag --disable-radix-cache (disable_radix_cache) is missing"
    ]
    fake(drop="Req.retraction_count")
    assert hooks_installed.check_installed() == [
        "sglang.srt.managers.schedule_batch.Req.retraction_count is missing"
    ]


def test_no_sglang_is_refused(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_sglang(name, *a, **kw):
        if name == "sglang" or name.startswith("sglang."):
            raise ImportError("No module named 'sglang'")
        return real_import(name, *a, **kw)

    fake_sglang.forget()
    monkeypatch.setattr(builtins, "__import__", no_sglang)
    with pytest.raises(hooks.IncompatibleSGLang, match="sglang is not importable"):
        hooks_installed.require_installed()


def test_install_patches_the_stand_in_classes(fake, tmp_path):
    fake()
    from sglang.srt.managers.scheduler_components import batch_result_processor as brp
    from sglang.srt.managers.utils import GenerationBatchResult

    from patches import scheduler_patch

    original = brp.SchedulerBatchResultProcessor._append_prefill_hidden_states
    state = scheduler_patch.install(str(tmp_path), writer_rank=True)
    try:
        hooked = brp.SchedulerBatchResultProcessor._append_prefill_hidden_states
        assert hooked is not original and getattr(hooked, scheduler_patch._MARK) is original
        scheduler_patch.install(str(tmp_path), writer_rank=True)  # a second install does not stack
        assert (
            getattr(brp.SchedulerBatchResultProcessor._append_prefill_hidden_states, scheduler_patch._MARK)
            is original
        )
        assert getattr(GenerationBatchResult.copy_to_cpu, scheduler_patch._MARK) is not None
        # an unmarked request takes the stock path with its arguments unchanged
        from types import SimpleNamespace

        req = SimpleNamespace(sampling_params=SimpleNamespace(custom_params=None))
        name, args = brp.SchedulerBatchResultProcessor()._append_prefill_hidden_states(
            req=req, logits_output=None, hidden_state_offset=3, capture_hidden_mode=None, extend_input_len=4
        )
        assert name == "_append_prefill_hidden_states" and args["hidden_state_offset"] == 3
        assert args["store"] is True
        assert state is not None
    finally:
        scheduler_patch._STATE.writer.close()


def test_the_simulated_stock_path_has_the_pinned_signature():
    """tests/patches/sim.py stands in for SGLang's hook in CPU tests: it must keep the exact
    parameters that the hook table (checked against the wheel) pins."""
    import inspect

    from tests.patches import sim

    (hook,) = [h for h in hooks.HOOKS if h.target.endswith("._append_prefill_hidden_states")]
    params = []
    for p in inspect.signature(sim.stock_append).parameters.values():
        if p.kind is p.KEYWORD_ONLY and "*" not in params:
            params.append("*")
        params.append(p.name)
    assert tuple(params) == tuple(hook.params)
