"""Checkpointer: falling back past unreadable checkpoints (never deleting one), stopping with one line when none
reads, and a save cut short never becoming the newest; StopSignal for SIGTERM and SIGINT."""

from __future__ import annotations

import os
import signal

import jax.numpy as jnp
import numpy as np
import pytest

from rcgrpo_jax.config_fields import InputError
from rcgrpo_jax.train import checkpoint as ckpt_lib


def _state(step: int) -> dict:
    w = np.random.default_rng(step).standard_normal((128, 128)).astype(np.float32)  # incompressible: a real data file
    return {"w": jnp.asarray(w), "step": jnp.asarray(step, jnp.int32)}


def _saved(tmp_path, steps=(1, 2, 3)) -> ckpt_lib.Checkpointer:
    ck = ckpt_lib.Checkpointer(str(tmp_path / "checkpoints"), every_steps=1, max_to_keep=5)
    for s in steps:
        ck.save(s, _state(s), {"step": s})
    ck.wait()
    return ck


def _largest_data_file(step_dir: str) -> str:
    files = [os.path.join(r, f) for r, _, fs in os.walk(os.path.join(step_dir, "state")) for f in fs]
    data = [f for f in files if f"{os.sep}d{os.sep}" in f]
    return max(data, key=os.path.getsize)


def _restore(ck):
    lines: list[str] = []
    return ck.restore_latest(_state(0), report=lines.append), lines


def test_default_keeps_more_than_one_checkpoint():
    from rcgrpo_jax.config_lib import common

    assert common.checkpoint().max_to_keep > 1


@pytest.mark.parametrize("damage", ["truncated_data", "truncated_meta", "deleted_state"])
def test_unreadable_newest_falls_back_to_the_previous_and_keeps_it(tmp_path, damage):
    ck = _saved(tmp_path)
    newest = os.path.join(ck.directory, "3")
    if damage == "truncated_data":
        path = _largest_data_file(newest)
        with open(path, "r+b") as f:
            f.truncate(1000)
    elif damage == "truncated_meta":
        with open(os.path.join(newest, "meta", "metadata"), "r+b") as f:
            f.truncate(10)
    else:
        import shutil

        shutil.rmtree(os.path.join(newest, "state"))
    restored, lines = _restore(ck)
    assert restored.step == 2 and restored.skipped == (3,) and restored.meta == {"step": 2}
    np.testing.assert_array_equal(np.asarray(restored.state["w"]), np.asarray(_state(2)["w"]))
    assert len(lines) == 1 and "/3 is unreadable (" in lines[0] and "using step 2" in lines[0]
    assert "\n" not in lines[0]
    moved = os.path.join(ck.unreadable_dir, "3")
    assert os.path.isdir(moved) and not os.path.exists(newest)  # moved aside whole, not deleted
    assert ck.all_steps() == [1, 2]
    ck.save(3, _state(3), {"step": 3}, force=True)  # the run can save that step again
    ck.wait()
    assert ck.all_steps() == [1, 2, 3]
    ck.close()


def test_every_checkpoint_unreadable_stops_with_one_line_naming_the_directory(tmp_path):
    ck = _saved(tmp_path, steps=(1, 2))
    for s in (1, 2):
        with open(os.path.join(ck.directory, str(s), "meta", "metadata"), "r+b") as f:
            f.truncate(5)
    lines: list[str] = []
    with pytest.raises(InputError) as e:
        ck.restore_latest(_state(0), report=lines.append)
    msg = str(e.value)
    assert msg.startswith(f"{ck.directory}: no readable checkpoint (steps 2, 1") and "\n" not in msg
    assert len(lines) == 2 and all("is unreadable" in line for line in lines)
    assert ck.all_steps() == [1, 2] and not os.path.exists(ck.unreadable_dir)  # nothing moved or deleted
    ck.close()


def test_empty_directory_restores_nothing(tmp_path):
    ck = ckpt_lib.Checkpointer(str(tmp_path / "checkpoints"), every_steps=1, max_to_keep=2)
    assert _restore(ck) == (None, [])
    ck.close()


def test_a_save_cut_short_never_becomes_the_newest(tmp_path):
    ck = _saved(tmp_path, steps=(1, 2))
    # What a save killed mid-write leaves: orbax's temporary directory with some of the items.
    ck.close()
    tmp = os.path.join(tmp_path, "checkpoints", "3.orbax-checkpoint-tmp-1765000000000000")
    os.makedirs(os.path.join(tmp, "state"))
    with open(os.path.join(tmp, "state", "_METADATA"), "w") as f:
        f.write('{"tree_metadata": {')
    ck = ckpt_lib.Checkpointer(str(tmp_path / "checkpoints"), every_steps=1, max_to_keep=5)
    assert ck.latest_step() == 2 and ck.all_steps() == [1, 2]
    restored, lines = _restore(ck)
    assert restored.step == 2 and lines == []
    ck.save(3, _state(3), {"step": 3})  # the cut step saves again beside the leftover
    ck.wait()
    assert ck.all_steps() == [1, 2, 3] and os.path.isdir(tmp)
    ck.close()


def test_orbax_finalizes_a_save_by_renaming_a_temporary_directory(tmp_path, monkeypatch):
    """The atomicity the fallback leans on: while items are written, no `<step>` directory exists."""
    seen: list[list[str]] = []
    ck = ckpt_lib.Checkpointer(str(tmp_path / "checkpoints"), every_steps=1, max_to_keep=2)
    real = os.rename

    def spy(src, dst, *a, **k):
        seen.append(sorted(os.listdir(ck.directory)))
        return real(src, dst, *a, **k)

    monkeypatch.setattr(os, "rename", spy)
    ck.save(1, _state(1), {"step": 1})
    ck.wait()
    monkeypatch.undo()
    assert seen and all("1" not in names for names in seen)
    assert any(n.startswith("1.orbax-checkpoint-tmp") for n in seen[0])
    assert ck.all_steps() == [1]
    ck.close()


@pytest.mark.parametrize("sig,reason", [(signal.SIGTERM, "sigterm"), (signal.SIGINT, "sigint")])
def test_stop_signal_turns_sigterm_and_sigint_into_a_flag(sig, reason):
    before = signal.getsignal(signal.SIGINT)  # default_int_handler; SIG_IGN under a shell's `cmd &`
    with ckpt_lib.StopSignal() as stop:
        os.kill(os.getpid(), sig)
        assert stop.requested and stop.reason == reason
        if sig == signal.SIGINT:  # a second Ctrl-C does not wait for the step
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before  # the handler it found is back
