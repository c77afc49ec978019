"""qkv: attention mechanisms and Transformers (D2L chapter 11) in C++, from Python.

Arrays. ``qkv.Tensor`` holds float32, float64, int64 or bool data and shares memory with numpy:
``qkv.from_numpy(a)`` and ``t.numpy()`` never copy (``from_numpy`` raises ValueError for an array
it cannot share unless ``copy=True``), ``np.asarray(t)`` and ``memoryview(t)`` use the buffer
protocol, and ``__dlpack__`` / ``qkv.from_dlpack`` exchange CPU tensors with numpy or PyTorch.
``t.to("bfloat16")`` stores bfloat16 (round to nearest even): views, copies, ``.to`` and DLPack
(``torch.from_dlpack``) only; numpy has none, so ``t.numpy()`` raises TypeError, and computing
ops raise ``qkv.Error`` until ``t.to("float32")``. ``t.to("float16")`` stores IEEE half (storage
only likewise), shared with numpy's ``float16`` both ways; attention takes float16 q, k, v.
Attention takes (B, H, T, D) arrays (batch, heads, time, head width); arrays laid out
(B, T, H, D) must say ``layout="BTHD"``.

Autograd: ``t.requires_grad_()``, ops on tensors, ``loss.backward()``, ``t.grad``.

Errors: qkv's checks raise ``qkv.Error`` (a RuntimeError) with the C++ library's message;
argument conversions raise TypeError / ValueError naming the argument.

Threads: heavy calls (attention, matmul, backward, module forwards, translation, training)
release the GIL. A ``Translator`` may be shared by threads (each concurrent call borrows its own
copy of the model). Tensors, modules and optimizers are not locked: do not change one from two
threads at once. The default random generator (``qkv.manual_seed``) is process-wide.

Notebooks (notebooks/, docs/notebooks.md): ``qkv.d2l`` holds D2L's plotting, data and BLEU helpers
and a progress bar. ``qkv.attention_trace(model_dir, sentence)`` gives a model's attention weights as numpy arrays (what
``qkv heatmap`` draws); ``qkv.allocator_stats()`` the tensor allocator's counters.

OpenMP: as the ``qkv`` program, importing qkv sets ``OMP_WAIT_POLICY=passive`` unless
``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` is already set (threads that spin while waiting slow
everything down on a shared machine). It takes effect only when qkv is the first module to load
the OpenMP runtime (libgomp); otherwise set the variable before starting Python.
"""
import os as _os

from . import _openmp

# Passive OpenMP waiting, as the qkv program has it (idle threads that spin starve the working ones
# on a shared machine), unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set: before _qkv loads libgomp,
# which reads it once. os.environ (Python's copy of the C environment) is kept in step.
if _openmp.default_to_passive_wait():
    _os.environ["OMP_WAIT_POLICY"] = "passive"

from ._qkv import (  # noqa: E402, F401
    AdditiveAttention, Adam, AdamW, Bahdanau, DotProductAttention, EncoderDecoder, Error, allocator_stats,
    attention_trace, reset_allocator_stats,
    MultiHeadAttention, Module, NWKernelRegression, Optimizer, PositionalEncoding, SGD,
    ScoreResult, Tensor, Transformer, TransformerDecoder, TransformerEncoder, TranslationResult,
    Translator, as_tensor, clip_grad_norm, from_dlpack, from_numpy, is_grad_enabled,
    leave_one_out, load_safetensors, manual_seed, masked_softmax, matmul, nadaraya_watson,
    nw_data, ones, rand, randn, get_num_threads, set_num_threads, set_flush_denormal, positional_encoding, save_safetensors, scaled_dot_product_attention,
    sequence_mask, set_grad_enabled, softmax, zeros,
)
from . import _qkv
from . import d2l  # noqa: F401  (the notebooks' plotting, data and BLEU helpers: D2L's d2l package)

__version__ = "0.1.0"


def tensor(data, dtype=None, requires_grad=False):
    """A copy of ``data`` (array, list, number or Tensor) as a new leaf tensor, like torch.tensor."""
    return Tensor(data, dtype, requires_grad)


class no_grad:
    """Context manager that stops recording autograd history on this thread (torch.no_grad)."""

    def __enter__(self):
        self._prev = is_grad_enabled()
        set_grad_enabled(False)

    def __exit__(self, *exc):
        set_grad_enabled(self._prev)
        return False


def train(out_dir=None, config=None, *, preset=None, model="transformer", resume=False,
          overwrite=False, progress=False, quiet=False, on_step=None, on_validation=None, **settings):
    """Trains a translation model, or a language model, as ``qkv train`` does (the same library call, train::run).

    ``config`` (a dict) and keyword arguments take ``qkv train``'s flags by name, ``-`` or ``_``:
    ``data``, ``max_steps``, ``epochs``, ``num_hiddens``, ``batch_size``, ``lr``, ``schedule``,
    ``subword``, ... (keywords win over ``config``); durations (``time_budget``, ``val_every``) in
    seconds or as the flags write them ("20m", "90s", "none"; 0 is no limit, None the preset's,
    others at least 1 s; a negative, inf or nan value is a ValueError naming the setting);
    ``preset`` (default "demo"; "lm" for ``model="lm"``, or "lm-tiny"), ``model`` ("transformer",
    "bahdanau", or "lm": the decoder-only language model on a text, ``data`` naming it, with its
    own ``num_kv_heads``, ``positions`` and ``window``; ``qkv generate`` samples the folder),
    ``out``/``out_dir`` (once: default "runs/qkv"), ``resume`` and ``overwrite`` may also be given
    in ``config``. Numbers take the ranges of ``qkv train``'s flags (``max_steps=0``
    is refused as ``--max-steps 0`` is); a value outside is a ValueError naming the keyword.
    ``on_step(d)`` is called at each logged step (``d``: step, epoch, loss, lr, tokens_per_s,
    train_seconds; every ``log_every`` steps) and ``on_validation(d)`` after each validation
    (step, val_loss), on the training thread with the GIL held; an exception from either stops the
    run (with a checkpoint) and is raised here. Ctrl-C (or any KeyboardInterrupt) stops at the
    next step boundary, writes the checkpoint and raises KeyboardInterrupt; ``resume=True``
    continues from it. Returns a dict: trained, steps, stop_reason, train_seconds, tokens_per_s,
    epochs (per-epoch train/val loss), out_dir.
    """
    if config is not None and not isinstance(config, dict):
        raise TypeError(f"train: config must be a dict of qkv train's settings by name, got {type(config).__name__}")
    merged = dict(config or {})
    merged.update(settings)
    given_out = [k for k in ("out", "out_dir") if k in merged]
    if len(given_out) + (out_dir is not None) > 1:
        raise TypeError("train: the output folder is given more than once (out_dir, and out or out_dir in the "
                        "settings): give it once")
    out_dir = merged.pop(given_out[0]) if given_out else out_dir
    if out_dir is None:
        out_dir = "runs/qkv"
    if not isinstance(out_dir, (str, _os.PathLike)):
        raise TypeError(f"train: out_dir must be a str or os.PathLike naming a folder, got {type(out_dir).__name__}")
    preset = merged.pop("preset", preset)
    model = merged.pop("model", model)
    if preset is None:
        preset = "lm" if model == "lm" else "demo"
    resume = merged.pop("resume", resume)
    overwrite = merged.pop("overwrite", overwrite)
    # preset and model are names: a nested dict ({"model": {"num_heads": 4}}) is not a setting.
    for name, value in (("preset", preset), ("model", model)):
        if not isinstance(value, str):
            raise TypeError(f"train: {name} must be a name (str) such as 'demo' / 'transformer', got "
                            f"{type(value).__name__} {value!r}; settings are given flat, e.g. num_heads=4")
    # The switches are True or False (resume="no" would be true); callbacks are callables.
    for name, value in (("resume", resume), ("overwrite", overwrite), ("progress", progress), ("quiet", quiet)):
        if not isinstance(value, bool):
            raise TypeError(f"train: {name} must be True or False, got {type(value).__name__} {value!r}")
    for name, f in (("on_step", on_step), ("on_validation", on_validation)):
        if f is not None and not callable(f):
            raise TypeError(f"train: {name} must be a callable or None, got {type(f).__name__}")
    return _qkv._train(_os.fspath(out_dir), preset, model, resume, overwrite, progress, quiet, on_step,
                       on_validation, merged)
