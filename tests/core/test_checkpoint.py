"""Checkpoints: an interrupted fit, resumed, gives the model of an uninterrupted one."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from mogp_surprise.core import MWGPConfig, fit_mwgp
from mogp_surprise.core import checkpoint, trainer
from mogp_surprise.core.checkpoint import Checkpointing
from tests.conftest import ON_CPU

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(5)
    n, levels = 1500, (20, 15)  # 5 ratings a pair: early stopping picks all 4 epochs (not 1), so a run resumes mid-way
    index = np.stack([rng.integers(0, levels[0], n), rng.integers(0, levels[1], n)], 1)
    a, b = rng.normal(size=(levels[0], 2)), rng.normal(size=(levels[1], 2))
    y = np.clip(np.round(3 + (a[index[:, 0]] * b[index[:, 1]]).sum(1) + rng.normal(0, 0.3, n)), 1, 5)
    return index, y, levels


def config(**changes) -> MWGPConfig:
    """A resumed fit equals an uninterrupted one bit for bit: on the CPU (``ON_CPU``)."""
    return MWGPConfig(**{"n_inducing": 16, "n_epochs": 4, "random_state": 0, "batch_size": 256,
                         "early_stopping": False, **ON_CPU, **changes})


class Stop(Exception):
    pass


def interrupt_after(monkeypatch, saves: int) -> None:
    """Make the fit die right after its ``saves``-th checkpoint was written (a crash after the write)."""
    original, count = trainer._Saver.save, []

    def save(self, *args, **kwargs):
        original(self, *args, **kwargs)
        count.append(1)
        if len(count) == saves:
            raise Stop
    monkeypatch.setattr(trainer._Saver, "save", save)


def stopped_after_two_checkpoints(monkeypatch, data, path):
    """(the fit of ``data`` for 3 epochs never stopped, the checkpoint at ``path`` of one stopped after two)."""
    uninterrupted = fit_mwgp(*data, config(n_epochs=3))
    with monkeypatch.context() as patch:
        interrupt_after(patch, 2)
        with pytest.raises(Stop):
            fit_mwgp(*data, config(n_epochs=3), checkpointing=Checkpointing(path))
    return uninterrupted, torch.load(path, weights_only=True)


def interrupted_and_resumed(monkeypatch, data, cfg, path, saves: int, every: int = 1):
    """Fit ``data`` with ``cfg``, dying right after the ``saves``-th checkpoint (every ``every`` epochs) at
    ``path``; then the fit resumed from it."""
    with monkeypatch.context() as patch:
        interrupt_after(patch, saves)
        with pytest.raises(Stop):
            fit_mwgp(*data, cfg, checkpointing=Checkpointing(path, every=every))
    assert path.exists()
    return fit_mwgp(*data, cfg, checkpointing=Checkpointing(path, every=every, resume=True))


def same_posterior(a, b) -> bool:
    sa, sb = a.posterior.state_dict(), b.posterior.state_dict()

    def eq(x, y):
        if isinstance(x, dict):
            return x.keys() == y.keys() and all(eq(x[k], y[k]) for k in x)
        if isinstance(x, (list, tuple)):
            return len(x) == len(y) and all(eq(u, v) for u, v in zip(x, y))
        return torch.equal(x, y) if torch.is_tensor(x) else x == y
    return eq(sa, sb)


@pytest.mark.parametrize("changes, saves", [
    ({}, 2),  # stopped after epoch 2 of 4
    ({"early_stopping": True}, 1),  # stopped while choosing the number of epochs
    ({"early_stopping": True}, 5),  # stopped in the final run, after its first epoch
    # an automatic batch (256 here): four settings searched on the split, 4 epochs each
    ({"early_stopping": True, "batch_size": "auto"}, 10),  # stopped while trying the third setting
    ({"early_stopping": True, "batch_size": "auto"}, 14),  # in the fourth: three runs' calibrations checkpointed
    ({"early_stopping": True, "batch_size": "auto"}, 17),  # stopped in the final run
    ({"noise": "homoscedastic", "implicit": False, "mf_rank": 0}, 3),
    # with early stopping the factors are variational and their noise scaled (core/validation.py); MAP factors
    # with early stopping keep theirs:
    ({"early_stopping": True, "mf_posterior": "laplace"}, 5),
], ids=["default", "while-choosing-epochs", "final-run", "while-searching-settings",
        "while-searching-the-last-setting", "final-run-after-it",
        "paper-model", "laplace-final-run"])
def test_a_resumed_fit_equals_an_uninterrupted_one(tmp_path, monkeypatch, data, changes, saves):
    cfg = config(**changes)
    whole = fit_mwgp(*data, cfg)
    resumed = interrupted_and_resumed(monkeypatch, data, cfg, tmp_path / "fit.ckpt", saves)
    assert same_posterior(whole, resumed)
    assert resumed.loss_history == whole.loss_history
    assert resumed.validation_rmse == whole.validation_rmse and resumed.n_epochs == whole.n_epochs
    assert resumed.searched == whole.searched and resumed.chosen == whole.chosen
    assert (resumed.noise_scale, resumed.noise_shrink) == (whole.noise_scale, whole.noise_shrink)
    # the noise scaled on early stopping's held-out ratings (variational factors) or, without early stopping, on
    # the training ratings' leave-one-out errors (MAP factors, from 1,000 ratings; core/validation.py)
    held_out = changes.get("early_stopping", False) and "mf_posterior" not in changes
    leave_one_out = not changes.get("early_stopping", False) and len(data[1]) >= 1000
    assert (whole.noise_scale != 1.0) == (held_out or leave_one_out)
    assert len(resumed.loss_history) > 1 and (saves < 4 or whole.n_epochs > 1)  # interrupted mid-run
    # and the comparison can fail: a different seed is a different model
    assert not same_posterior(whole, fit_mwgp(*data, config(**changes, random_state=1)))


@pytest.mark.parametrize("seed", [None, "generator"])
def test_a_fit_without_a_fixed_seed_resumes_on_the_split_it_began_with(tmp_path, monkeypatch, data, seed):
    """Early stopping's internal split of a fit seeded afresh (``random_state=None``, or a numpy Generator whose
    state moved on) is drawn again as before the break: the settings tried before and after it are scored on one
    split, and no rating the interrupted run trained on is held out."""
    splits = []
    original = trainer.validation_split

    def spy(*args):
        held, kept = original(*args)
        splits.append(held.sort().values.tolist())
        return held, kept
    monkeypatch.setattr(trainer, "validation_split", spy)
    rng = np.random.default_rng(0)
    cfg = config(early_stopping=True, batch_size="auto", random_state=None if seed is None else rng)
    resumed = interrupted_and_resumed(monkeypatch, data, cfg, tmp_path / "fit.ckpt", saves=6)
    assert len(splits) == 2 and splits[0] == splits[1]
    assert len(resumed.searched) == 4
    fit_mwgp(*data, cfg)  # a fresh fit draws another split: the one above was no coincidence
    assert splits[2] != splits[0]


def test_checkpoints_every_k_epochs_and_after_the_last(tmp_path, monkeypatch, data):
    epochs = []
    original = trainer._Saver.save
    monkeypatch.setattr(trainer._Saver, "save", lambda self, phase, epoch, *a: (epochs.append(epoch),
                                                                                original(self, phase, epoch, *a)))
    fit_mwgp(*data, config(n_epochs=5), checkpointing=Checkpointing(tmp_path / "c.pt", every=2))
    assert epochs == [2, 4, 5]


def test_resume_without_a_checkpoint_starts_afresh(tmp_path, data):
    cfg = config(n_epochs=2)
    fresh = fit_mwgp(*data, cfg, checkpointing=Checkpointing(tmp_path / "none.pt", resume=True))
    assert same_posterior(fresh, fit_mwgp(*data, cfg))
    assert (tmp_path / "none.pt").exists()


def test_resuming_with_other_data_or_parameters_is_refused(tmp_path, data):
    path = tmp_path / "c.pt"
    fit_mwgp(*data, config(n_epochs=2), checkpointing=Checkpointing(path))
    with pytest.raises(ValueError, match=r"n_inducing: 16 in the checkpoint, 8 now"):
        fit_mwgp(*data, config(n_epochs=2, n_inducing=8), checkpointing=Checkpointing(path, resume=True))
    index, y, levels = data
    with pytest.raises(ValueError, match="ratings_sum"):
        fit_mwgp(index, y + 0.5, levels, config(n_epochs=2), checkpointing=Checkpointing(path, resume=True))
    swapped = y.copy()  # two different ratings trade places: the same count and sums, other data
    high, low = int(np.argmax(y)), int(np.argmin(y))
    swapped[[high, low]] = y[[low, high]]
    with pytest.raises(ValueError, match=r"data_digest: '[0-9a-f]{32}' in the checkpoint, '[0-9a-f]{32}' now"):
        fit_mwgp(index, swapped, levels, config(n_epochs=2), checkpointing=Checkpointing(path, resume=True))
    # hyper-parameters that do not change the model may differ
    fit_mwgp(*data, config(n_epochs=2, chunk_size=100), checkpointing=Checkpointing(path, resume=True))


def test_a_checkpoint_without_the_data_digest_resumes_and_a_generator_seed_resumes(tmp_path, monkeypatch, data):
    """A checkpoint written before the digest existed resumes on the sums it holds; a numpy Generator as
    random_state is compared as such (its repr, a memory address, refused every resume)."""
    path = tmp_path / "c.pt"
    uninterrupted, state = stopped_after_two_checkpoints(monkeypatch, data, path)
    del state["fingerprint"]["data_digest"], state["checksum"]  # as written before either existed
    torch.save(state, path)
    resumed = fit_mwgp(*data, config(n_epochs=3), checkpointing=Checkpointing(path, resume=True))
    assert same_posterior(resumed, uninterrupted)
    seeded = config(n_epochs=2, random_state=np.random.default_rng(0))
    fit_mwgp(*data, seeded, checkpointing=Checkpointing(tmp_path / "g.pt"))
    fit_mwgp(*data, config(n_epochs=2, random_state=np.random.default_rng(0)),
             checkpointing=Checkpointing(tmp_path / "g.pt", resume=True))


def test_a_damaged_checkpoint_is_refused_not_resumed(tmp_path, monkeypatch, data):
    """One changed number in a table (a flipped bit on disk) resumed from wrong parameters without a word: the
    checksum written with the checkpoint refuses it; the same file undamaged resumes to the uninterrupted fit."""
    path = tmp_path / "c.pt"
    uninterrupted, state = stopped_after_two_checkpoints(monkeypatch, data, path)
    assert state["checksum"] == checkpoint.checksum(state)
    name = next(k for k, v in state["module"].items() if v.is_floating_point() and v.numel() > 1)
    state["module"][name].view(-1)[0] += 2.0 ** -20
    torch.save(state, tmp_path / "damaged.pt")
    with pytest.raises(ValueError, match=r"damaged.pt is damaged: its contents do not match the checksum saved"):
        fit_mwgp(*data, config(n_epochs=3), checkpointing=Checkpointing(tmp_path / "damaged.pt", resume=True))
    resumed = fit_mwgp(*data, config(n_epochs=3), checkpointing=Checkpointing(path, resume=True))
    assert same_posterior(resumed, uninterrupted)


def test_an_interrupted_write_keeps_the_file_and_a_written_one_keeps_links_and_permissions(tmp_path, monkeypatch):
    """Ctrl-C while a checkpoint or model is written: the file before stays and no temporary file is left. A link
    is followed (its target replaced, the link kept) and a replaced file keeps its permissions."""
    path = tmp_path / "m.pt"
    checkpoint.write_atomically({"a": 1}, path, "the model")
    real_save = torch.save

    def interrupted(obj, f, *args, **kwargs):
        real_save(obj, f, *args, **kwargs)
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(torch, "save", interrupted)
        with pytest.raises(KeyboardInterrupt):
            checkpoint.write_atomically({"a": 2}, path, "the model")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"]
    assert torch.load(path, weights_only=True) == {"a": 1}
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "model.pt"
    checkpoint.write_atomically({"a": 1}, target, "the model")
    target.chmod(0o640)
    link = tmp_path / "link.pt"
    link.symlink_to(target)
    checkpoint.write_atomically({"a": 3}, link, "the model")
    assert link.is_symlink() and torch.load(target, weights_only=True) == {"a": 3}
    assert oct(target.stat().st_mode & 0o777) == oct(0o640)
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["model.pt"]


def test_a_folder_where_nothing_can_be_written_is_refused_before_the_fit(tmp_path, monkeypatch):
    """Found on a read-only mount: the fit ran to its end, then the write failed and the fit was lost. The folder
    is tried (a file created and removed) before the fit; here the creation fails as it does on such a mount."""
    import tempfile

    def read_only(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", read_only)
    with pytest.raises(PermissionError, match=r"cannot save the checkpoint to .*c\.pt'?: no file can be written in "
                                              r"the folder .* \(Read-only file system\)"):
        Checkpointing(tmp_path / "c.pt")
    assert not list(tmp_path.iterdir())


def test_a_checkpoint_path_that_cannot_be_written_is_refused_before_the_fit(tmp_path):
    with pytest.raises(ValueError, match="cannot save the checkpoint to .*: it is a folder; give a file name"):
        Checkpointing(tmp_path)
    with pytest.raises(FileNotFoundError, match="cannot save the checkpoint to .*: the folder .* does not exist"):
        Checkpointing(tmp_path / "nowhere" / "c.pt")


def test_a_file_that_is_not_a_checkpoint_is_named(tmp_path, data):
    path = tmp_path / "model.pt"
    torch.save({"format": "mogp_surprise"}, path)
    with pytest.raises(ValueError, match="is not a mogp_surprise checkpoint"):
        fit_mwgp(*data, config(), checkpointing=Checkpointing(path, resume=True))
    path.write_bytes(b"garbage")
    with pytest.raises(ValueError, match=r"not a readable mogp_surprise checkpoint \(not a zip archive, as `save` and "
                                         r"checkpoints write\)$"):
        fit_mwgp(*data, config(), checkpointing=Checkpointing(path, resume=True))
    path.write_bytes(b"PK\x03\x04 torn")  # torch's own message ends in advice and a code: "(101)"
    with pytest.raises(ValueError, match=r"checkpoint \(a damaged or truncated archive: RuntimeError: PytorchStreamReader failed reading zip archive: "
                                         r"[^.()]+\)$"):
        fit_mwgp(*data, config(), checkpointing=Checkpointing(path, resume=True))


@pytest.mark.parametrize("every", [0, -1, 1.5, True])
def test_checkpoint_interval_is_checked(every):
    with pytest.raises(ValueError, match=r"the epochs between checkpoints \(`checkpoint_every`\) must be an int >= 1"):
        Checkpointing("x.pt", every=every)


@pytest.mark.parametrize("path, resume, error", [
    (True, False, r"the checkpoint must go to a file path \(a str or path-like\), got True"),
    (3, False, "got 3"), ("c.pt", "no", "`resume` must be True or False, got 'no'")])
def test_a_checkpoint_path_or_resume_of_another_type_is_named(path, resume, error):
    with pytest.raises((TypeError, ValueError), match=error):
        Checkpointing(path, resume=resume)
