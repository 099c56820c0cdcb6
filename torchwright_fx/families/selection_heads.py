"""The heads that read a selection (``families/selection.py``): their query and key dims, the
recency lobe's margins with a selection's validity parts, and the half-precision readers."""

from __future__ import annotations

from torchwright_fx.base.errors import GeometryError
from torchwright_fx.base.numerics import ATTENTION_MARGIN, MAX_SELECT_VALUES
from torchwright_fx.families.selection import Features, bos_indicator
from torchwright_fx.ir.linear import Lin
from torchwright_fx.ir.ranges import Interval
from torchwright_fx.lower.context import LowerCtx
from torchwright_fx.ops import attention


def check_recency(ctx: LowerCtx, parts: int, what: str) -> None:
    """The recency lobe's margins when every selected key carries ``parts`` validity terms (a
    selection of that many parts); where one part would be certified and these many are not,
    the refusal says so and how to select on one."""
    try:
        attention.check_margins(ctx.geom, 0, with_validity=max(parts, 1))
    except GeometryError as e:
        if parts <= 1 or attention.measured_gap(ctx.geom, 0, 1)[0] < ATTENTION_MARGIN:
            raise
        raise GeometryError(
            f"{e}: {what} selects with {parts} parts (selectors joined by &, or == on more "
            f"than {MAX_SELECT_VALUES} values matched digit by digit), each adding the validity "
            f"gain {ctx.geom.validity:.3g} to every logit, and at this length fp32 certifies one",
            f"select on one part: make the keys one stream of at most {MAX_SELECT_VALUES} "
            "values (10 * a + b for two digits) and the queries alike, compile with a larger "
            "d_head where an == was split into digits to fit the head (one part holds "
            "d_head - 6 values: d_head=128 holds 122, 256 holds 250), or lower max_seq_len"
        ) from None


def head_qk(ctx: LowerCtx, feats: list[Features], gain: float, bos_dims: list[float],
        positional: bool, what: str) -> tuple[list[Lin], list[Lin]]:
    geom = ctx.geom
    if positional:
        q, k = attention.positional_qk(geom, 0)
    else:
        q = [Lin() for _ in range(geom.d_head)]
        k = [Lin() for _ in range(geom.d_head)]
    dims = [(fq * gain, fk) for f in feats for fq, fk in zip(f.q, f.k, strict=True)]
    vetoes: set[int] = set()  # bit_select's veto dims end the part they are merged into
    at = 0
    for f in feats:
        at += len(f.q)
        vetoes |= set(range(at - f.vetoes, at))
    dims += [(Lin.constant(c), bos_indicator(ctx)) for c in bos_dims]
    if len(dims) > geom.tail:
        fits = 1 << (len(dims) + geom.rotary - 1).bit_length()
        raise ctx.error(f"{what} needs {len(dims)} content dims in one head (one per class of "
                        f"equivalent key or query values, plus the <bos> fallback), more than "
                        f"the {geom.tail} of d_head={geom.d_head}",
                        f"compile with d_head={fits}, or select on streams with fewer distinct "
                        "values (map them first with tw.lookup)", fits)
    for r, (ql, _) in enumerate(dims):  # the tie argument: each query dim is G * (0/1
        # signals), or G; a veto dim's product is exactly 0 wherever its selection holds
        assert r in vetoes or ql.const == 0.0 and set(ql.terms.values()) <= {gain} \
            or not ql.terms, f"{what}: a query feature is not G times whole 0/1 columns: {ql}"
    for r, (ql, kl) in enumerate(dims):
        q[geom.rotary + r], k[geom.rotary + r] = ql, kl
    return q, k


def latest_half(ctx: LowerCtx, feats: list[Features], values: list[Lin],
                ranges: list[Interval]) -> list[Lin]:
    """The values at the latest key the factors ``feats`` select, the <bos> row when none, in
    half precision: recency from the exact position, every logit a whole multiple of the gain
    (``ops/position_half.latest``)."""
    from torchwright_fx.ops import position_half

    if any(f.vetoes for f in feats):  # its keys are gated as 0/1 features; a veto's is -1 or 0
        raise ctx.error("select_latest on bit vectors (tw.select == on several 0/1 columns) "
                        "is not certified in half precision yet",
                        "compile with precision='fp32', or select on the number the bits make "
                        "(sum(2 ** i * bits[:, i:i + 1]), at most 256 values) in half")
    parts = [list(zip(f.q, f.k, strict=True)) for f in feats]
    return position_half.latest(ctx.prog, ctx.geom, parts, values, ranges, bos_indicator(ctx),
                                ctx.name, ctx.source)


def width_half(ctx: LowerCtx, feats: list[Features]) -> Lin:
    """The number of keys 1 <= j <= i the factors ``feats`` select, in half precision: an
    averaging head and a search of exact comparisons (``ops/count_half.width``)."""
    from torchwright_fx.ops import count_half

    parts = [list(zip(f.q, f.k, strict=True)) for f in feats]
    return count_half.width(ctx.prog, ctx.geom, parts, bos_indicator(ctx), ctx.name,
                            ctx.source)
