"""What an attention declares about the two behaviours SDPA's signature leaves open.

- **causal alignment** with N != S: ``top_left`` (torch SDPA: query i keeps keys j <= i) or
  ``bottom_right`` (flash-attn >= 2.1, FlashInfer, vLLM: j <= i + S - N, the queries are the last N
  positions);
- **empty rows**, a query with no key to attend to: ``zeros`` (torch >= 2.5, flash-attn, FlashInfer),
  ``nan`` (softmax of all -inf), ``mean-v`` (a finite fill such as ``finfo.min`` gives every key the
  same weight: the mean of V over all S keys) or ``any`` (don't care: those rows are left out of
  every comparison).

Adapters declare them as :class:`attnum.kernels.registry.Kernel` fields (module constants
``CAUSAL_ALIGNMENT`` / ``EMPTY_ROWS``), a user's callable as function attributes
(``fn.attnum_causal_alignment = "bottom_right"``, ``fn.attnum_empty_rows = "nan"``); undeclared
means SDPA's own contract: top-left, zeros. A low-bit kernel may also declare ``attnum_emulation``
(``"sage1"``): the policy of attnum's emulation of its designed arithmetic, which the auditor then
judges it against (attnum.audit.emulated).

Score features (the probes softcap-overflow, window-poisoned-keys, attention-sinks): a target that
implements one says so, and then takes one more keyword argument on its SDPA entry point:

- ``attnum_softcap = True``: ``softcap=cap`` (float > 0), the scaled scores become ``cap * tanh(s / cap)``
  before masking (Gemma-2; flash-attn's ``softcap``);
- ``attnum_window = True``: ``window_size=(left, right)`` ints, flash-attn's convention: query i sees keys
  j with ``i + off - left <= j <= i + off + right``, ``off`` = 0 under top-left, ``S - N`` under
  bottom-right causal alignment; -1 = unbounded on that side; with ``is_causal=True``, right = 0. The
  common "window W" of causal serving kernels (key j visible when ``i + off - W < j <= i + off``) is
  ``window_size=(W - 1, 0)``;
- ``attnum_sinks = True``: ``sinks=`` a float32 tensor (H,), one logit per query head joining each row's
  softmax denominator only (gpt-oss);
- ``attnum_block_select = True``: ``block_indices=`` an int64 tensor (B, G, N, n) and ``block_size=`` an int:
  query i of KV head g sees only the keys of the blocks ``block_indices[b, g, i]`` (block t: keys
  ``t * block_size`` to ``(t + 1) * block_size - 1``; an index < 0 selects nothing), within its causal
  range (NSA's selected-attention branch, arXiv 2502.11089).

Undeclared means the target has no such feature: its probe reports "unsupported", never pass. A
declaration on the target (a function's attribute, a plain class's attribute, a ``ServingTarget``'s
``features=``) covers its SDPA entry point and its ``decode`` entry point, which then takes the same keyword;
one on an entry point (``decode.attnum_softcap = True``) covers that entry alone (:func:`entry_feature`).
"""

from __future__ import annotations

from attnum.errors import bad_value

CAUSAL_ALIGNMENTS = ("top_left", "bottom_right")
EMPTY_ROWS = ("zeros", "nan", "mean-v", "any")
DEFAULT_CAUSAL_ALIGNMENT = "top_left"
DEFAULT_EMPTY_ROWS = "zeros"
ATTRIBUTES = {"causal_alignment": "attnum_causal_alignment", "empty_rows": "attnum_empty_rows",
              "emulation": "attnum_emulation"}


def causal_alignment(value: object, param: str = "causal_alignment") -> str:
    """"top-left" / "top_left" / "bottom-right" / "bottom_right" -> the canonical name."""
    text = value.strip().lower().replace("-", "_") if isinstance(value, str) else value
    if text not in CAUSAL_ALIGNMENTS:
        raise bad_value(param, value, "top-left or bottom-right")
    return text


def empty_rows(value: object, param: str = "empty_rows") -> str:
    """One of :data:`EMPTY_ROWS` ("mean_v" accepted for "mean-v")."""
    text = value.strip().lower().replace("_", "-") if isinstance(value, str) else value
    if text not in EMPTY_ROWS:
        raise bad_value(param, value, f"one of {', '.join(EMPTY_ROWS)}")
    return text


def declared(fn: object) -> dict[str, str]:
    """The conventions a callable declares through its ``attnum_*`` attributes (validated)."""
    out = {}
    for field, attr in ATTRIBUTES.items():
        value = getattr(fn, attr, None)
        if value is not None:
            if field == "emulation":  # a policy naming the designed arithmetic (attnum.audit.emulated)
                value = check_emulation(value, param=f"{getattr(fn, '__name__', 'target')}.{attr}")
                if value:
                    out[field] = value
                continue
            norm = causal_alignment if field == "causal_alignment" else empty_rows
            out[field] = norm(value, param=f"{getattr(fn, '__name__', 'target')}.{attr}")
    return out


def emulation_policy(emulation: str, dtype) -> str:
    """``sage1`` -> ``sage1:<dtype>``; a spec with its own format (``sage1:fp16,pv_acc=fp32``) as is."""
    from attnum.numerics.formats import format_of_dtype

    return emulation if ":" in emulation else f"{emulation}:{format_of_dtype(dtype).name}"


def check_emulation(value: object, param: str = "emulation") -> str | None:
    """A policy (``sage1``, ``sage1:fp16,pv_acc=fp32``) to judge against; None / "none": the standard rule."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    import torch

    from attnum.errors import AttnumInputError
    from attnum.numerics.policy import parse_policy

    text = value.strip() if isinstance(value, str) else value
    try:
        parse_policy(emulation_policy(text, torch.float16))
    except (AttnumInputError, AttributeError, TypeError, ValueError):
        raise bad_value(param, value, "a policy naming the kernel's designed arithmetic (e.g. sage1), or none") from None
    return text


FEATURES = {"softcap": "attnum_softcap", "window": "attnum_window", "sinks": "attnum_sinks", "mla": "attnum_mla",
            "block_select": "attnum_block_select"}


def feature(fn: object, name: str, param: str | None = None) -> bool:
    """Whether ``fn`` declares the feature ``name`` with ``attnum_<name> = True``: the score features of its SDPA
    and decode entry points (softcap, window, sinks, block_select), or ``mla`` (its decode entry point takes a latent
    cache: one KV head whose first dv dims are the values, the mla-latent-decode probe). ``param``: the name the
    one-line error gives ``fn`` (default: its ``__name__``)."""
    if name not in FEATURES:
        raise bad_value("feature", name, f"one of {', '.join(FEATURES)}")
    value = getattr(fn, FEATURES[name], None)
    if value is None or value is False:
        return False
    if value is not True:
        raise bad_value(f"{param or getattr(fn, '__name__', 'target')}.{FEATURES[name]}", value, "True or False")
    return True


def entry_feature(target: object, entry: object, name: str) -> bool:
    """Whether a serving entry point (``target.decode``) takes the score feature ``name``: declared on the entry
    itself (``decode.attnum_softcap = True``) or on the whole target (every entry point that scores keys takes
    it: :class:`attnum.kernels.serving.ServingTarget` ``features=``, a plain class's ``attnum_softcap = True``)."""
    return feature(entry, name) or feature(target, name)


def label(alignment: str) -> str:
    """"bottom_right" -> "bottom-right" (how flags and notes spell it)."""
    return alignment.replace("_", "-")
