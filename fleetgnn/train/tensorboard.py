"""TensorBoard event files of a run (``train.tensorboard: true``; the ``tensorboard`` extra).

:class:`TensorBoardLogger` is a built-in callback of the Trainer: rank 0 writes one run per run
directory, in ``RUN_DIR/tensorboard`` (``tensorboard --logdir runs/`` shows each run directory as
a run), one point per epoch at step = epoch:

================================= ==================================================================
tag                               value
================================= ==================================================================
``train/loss``, ``train/acc``     the epoch's training loss and (training-mode) accuracy
``eval/val_acc`` ...              ``val_acc``, ``test_acc``, ``val_loss``, ``train_acc`` of the
                                  epochs that evaluate; for a link task also ``val_auc``,
                                  ``val_ap``, ``val_mrr``, ``val_hits@K`` and their ``test_``
``time/epoch_s``, ``time/eval_s`` the epoch's training and evaluation seconds
``time/<phase>``                  seconds per phase (``sample``, ``gather``, ``forward``,
                                  ``backward``, ``communication``, ``optimizer``, ``total``)
``traffic/<link>``                bytes per link kind (``local``, ``peer``, ``h2d``, ``d2h``,
                                  ``net``, ``disk``), summed over ranks
``memory/<tier>``                 peak bytes per memory tier
``optim/lr``                      the first parameter group's learning rate after the epoch
================================= ==================================================================

A resumed run appends to the same directory and drops the points of the epochs it runs again
(``purge_step``); a fresh run replaces the directory's event files.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Mapping
from typing import Any

from fleetgnn.errors import ConfigError
from fleetgnn.train.callbacks import Callback, Trainer
from fleetgnn.train.checkpoint import _utf8_path

#: Record keys of a link task's metrics (``val_auc``, ``test_hits@10`` ...), logged as ``eval/``.
LINK_METRIC_PREFIXES: tuple[str, ...] = tuple(
    f"{split}_{m}" for split in ("val", "test") for m in ("auc", "ap", "mrr", "hits@")
)

#: The run directory's subdirectory of event files.
TENSORBOARD_DIR = "tensorboard"


def summary_writer_class() -> type:
    """``torch.utils.tensorboard.SummaryWriter``.

    Raises:
        ConfigError: The ``tensorboard`` package is not installed (one line, with the fix).
    """
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ConfigError(
            "train.tensorboard=true needs the tensorboard package: pip install "
            "'fleetgnn[tensorboard]' (or pip install tensorboard), or set train.tensorboard=false"
        ) from None
    return SummaryWriter


class TensorBoardLogger(Callback):
    """Writes each epoch's metrics as TensorBoard scalars (rank 0; see the module)."""

    key = "tensorboard"  # type: ignore[assignment]

    def __init__(self) -> None:
        self._cls = summary_writer_class()  # refuses at once when the package is missing
        self._writer: Any = None

    def on_fit_start(self, trainer: Trainer) -> None:
        """Open ``RUN_DIR/tensorboard`` (rank 0): cleared on a fresh run, purged on a resume."""
        if not trainer.is_main:
            return
        path = trainer.run_dir / TENSORBOARD_DIR
        if not _utf8_path(path):
            raise ConfigError(
                f"train.tensorboard=true cannot write under '{path}': TensorBoard takes only "
                f"UTF-8 paths and this run directory's name is not UTF-8; set "
                f"train.tensorboard=false, or use a run directory with a UTF-8 name"
            )
        if not trainer.resumed:
            shutil.rmtree(path, ignore_errors=True)
        purge = trainer.state.epoch if trainer.resumed else None
        self._writer = self._cls(log_dir=str(path), purge_step=purge)

    def on_epoch_end(self, trainer: Trainer, record: Mapping[str, Any]) -> None:
        """Add the epoch's scalars (rank 0)."""
        if self._writer is None:
            return
        step = int(record["epoch"])
        scalars: dict[str, Any] = {
            "train/loss": record.get("loss"),
            "train/acc": record.get("train_acc"),
            "time/epoch_s": record.get("epoch_time_s"),
            "time/eval_s": record.get("eval_time_s") if record.get("evaluated") else None,
        }
        for key in ("val_acc", "test_acc", "val_loss"):
            scalars[f"eval/{key}"] = record.get(key)
        for key, value in record.items():  # a link task's AUC, AP, MRR and Hits@K
            if key.startswith(LINK_METRIC_PREFIXES):
                scalars[f"eval/{key}"] = value
        scalars["eval/train_acc"] = record.get("eval_train_acc")
        for group in ("times", "traffic", "memory"):
            tag = "time" if group == "times" else group
            for k, v in (record.get(group) or {}).items():
                scalars[f"{tag}/{k}"] = v
        optimizer = trainer.engine.optimizer  # EngineBase declares it (None by default)
        if optimizer is not None and optimizer.param_groups:
            scalars["optim/lr"] = optimizer.param_groups[0]["lr"]
        for tag, value in scalars.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if math.isfinite(float(value)):
                    self._writer.add_scalar(tag, float(value), step)
        self._writer.flush()

    def on_fit_end(self, trainer: Trainer, summary: Mapping[str, Any] | None) -> None:
        """Close the event file."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
