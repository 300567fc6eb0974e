"""``mx.autograd``: sparse-ops' autograd already has MXNet's names and signatures.

``record(train_mode=True)``, ``pause(train_mode=False)``, ``train_mode()``,
``predict_mode()``, ``is_recording()``, ``is_training()``, ``set_recording(flag)``,
``set_training(flag)`` (both return the previous value), ``mark_variables``,
``backward``, ``grad`` and ``Function``. (``get_symbol`` is Symbol API: not covered.)
"""
from ...autograd import (  # noqa: F401
    Function,
    backward,
    grad,
    is_recording,
    is_training,
    mark_variables,
    pause,
    predict_mode,
    record,
    set_recording,
    set_training,
    train_mode,
)

__all__ = ["record", "pause", "train_mode", "predict_mode", "is_recording", "is_training",
           "set_recording", "set_training", "mark_variables", "backward", "grad", "Function"]
