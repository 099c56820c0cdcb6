"""Every numeric constant the constructions rest on, with where its value comes from.

All arithmetic is fp32, as in the emitted Phi-3 checkpoint.
"""

import math

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
# Rotary dims per head: two planes in Phi-3's rotate_half layout. Plane 0 has frequency 1 (fixed
# by the RoPE formula) and is unused; plane 1's frequency pi/max_seq_len is set by rope_theta.
ROTARY_DIMS = 4

# -- output decoding ---------------------------------------------------------------------------
# lm_head gives token t the logit DECODE_GAIN * (t*c - t*t/2) for the output code c, which is
# maximal at t = round(c); an exact code beats its neighbours by DECODE_GAIN/2.
DECODE_GAIN = 16.0

# -- RMSNorm identity --------------------------------------------------------------------------
# Smallest power-of-two pin exponent (DESIGN §5): data energy must stay below 2**(2q-24).
PIN_MIN_EXPONENT = 44
# Largest pin exponent: pin**2 summed must stay finite in fp32 (max ~2**128).
PIN_MAX_EXPONENT = 60
RMS_EPS = 1e-5


def is_power_of_two(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0


def sqrt_exact(n: int) -> float:
    """sqrt(n), used to fold Phi-3's 1/sqrt(d_head) logit scale into W_Q."""
    return math.sqrt(n)
