"""Every exception torchwright_fx raises, in one hierarchy, and the helpers that point an
error at the user's source line.

    TorchwrightError                   something the user can act on (the CLI prints it, exit 2)
    +-- CompileError                   a program the compiler refuses; names the user's line
    |   +-- HeadTooSmall               a head needs a larger d_head (d_head=None retries there)
    |   +-- GeometryError, ValueError  d_head / max_seq_len cannot host attention exactly
    |   +-- WidthError, ValueError     more residual columns than d_model provides
    |   +-- EnergyError, ValueError    values too large for the RMSNorm pins to absorb
    +-- InputError, ValueError         a prompt the compiled program cannot take
        +-- SequenceTooLongError       more positions than the ONNX static cache holds
    RangeError, ValueError             a construction's obligation on a value range; lowering
    +-- NotExact                       turns it into a CompileError naming the user's line
    PlanError, AssertionError          a plan breaking an invariant: a compiler bug
    UsageError                         a command line naming no program (the CLI, exit 2)

The constructions (``ops/``), the scheduler, the emitter and the backends raise these; each
class says where.
"""

from __future__ import annotations

import os
import traceback
from types import TracebackType

import torch.fx

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


class TorchwrightError(Exception):
    """Every error torchwright_fx raises for something the user can act on."""


class CompileError(TorchwrightError):
    """A program construct that cannot be compiled; the message names the user's line.
    ``split_d_head``: set by lowering where it had split a selection's == into digits to fit
    the head (``Shared.split_d_head``), which a compile with d_head=None retries without."""

    split_d_head: int = 0


class HeadTooSmall(CompileError):
    """A construction needs more content dims in one head than d_head leaves: ``d_head`` is the
    smallest head size that fits, ``reason`` why (the construction's words, without the user's
    line and the op that the message adds). With ``d_head=None`` (the default) the compiler
    retries at that size instead of raising, and its summary quotes ``reason``."""

    def __init__(self, message: str, d_head: int, reason: str | None = None):
        super().__init__(message)
        self.d_head = d_head
        self.reason = message if reason is None else reason


class GeometryError(CompileError, ValueError):
    """The chosen d_head / max_seq_len cannot host the attention constructions exactly
    (``ops/attention.py``, ``ops/position.py``). ``advice``: what the user can change; lowering
    adds it and the user's line once, for every op (``lower/lowering.py``)."""

    def __init__(self, message: str, advice: str = "raise d_head or lower max_seq_len"):
        super().__init__(message)
        self.advice = advice


def reason_and_advice(e: CompileError) -> tuple[str, str]:
    """A refusal's reason without the user's line and op, and its advice: what an op that
    tried one construction and falls back to another quotes when the fallback is refused too."""
    if isinstance(e, GeometryError):
        return str(e).strip(), e.advice
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    if len(lines) < 3:  # not yet given the user's line: the message and, maybe, advice
        return lines[0] if lines else "", lines[1] if len(lines) > 1 else ""
    return lines[1].split("): ", 1)[-1], lines[-1]


class WidthError(CompileError, ValueError):
    """The program needs more residual columns than d_model provides
    (``schedule/columns.py``)."""


class EnergyError(CompileError, ValueError):
    """The data is too large for the RMSNorm pins to absorb (``emit/rmsnorm.py``)."""


class InputError(TorchwrightError, ValueError):
    """A prompt the compiled program cannot take (too long, characters outside the
    vocabulary)."""


class SequenceTooLongError(InputError):
    """A prompt or a generation would need more positions than the static cache holds
    (``backends/onnx_runner.py``)."""


class RangeError(ValueError):
    """A construction needs a finite value range that the program does not provide, or a
    range it cannot meet (``ops/ffn``, ``ops/ties.py``); lowering turns it into a
    CompileError naming the user's line. ``noisy``: the input's compiled noise is what it
    cannot meet (lowering then names where the noise comes from)."""

    def __init__(self, message: str, noisy: bool = False):
        super().__init__(message)
        self.noisy = noisy


class NotExact(RangeError):
    """A step the compiler cannot prove exact (the user may accept it with exact=False)."""


class PlanError(AssertionError):
    """A plan that breaks an invariant: a compiler bug, never a user error
    (``schedule/plan.py``)."""


class UsageError(Exception):
    """A command line that names no program: one line on stderr, exit status 2 (``cli.py``)."""


def is_user_file(filename: str) -> bool:
    path = os.path.abspath(filename)
    return not (path.startswith(_PACKAGE_DIR) or path.startswith(_TORCH_DIR)
                or "site-packages" in path or filename.startswith("<frozen"))


def user_frame_from_traceback(tb: TracebackType | None) -> str:
    """The innermost frame of user code in a traceback, as 'file:line: code'."""
    frames = [f for f in traceback.extract_tb(tb) if is_user_file(f.filename)]
    if not frames:
        return "<unknown source>"
    f = frames[-1]
    return f"{f.filename}:{f.lineno}: {(f.line or '').strip()}"


def node_source(node: torch.fx.Node) -> str:
    """The user line that created an fx node, from the stack trace fx recorded."""
    trace = node.meta.get("stack_trace") or ""
    lines = trace.strip().splitlines()
    best = "<unknown source>"
    for i, line in enumerate(lines):
        line = line.strip()
        if not line.startswith('File "'):
            continue
        filename = line.split('"')[1]
        if not is_user_file(filename):
            continue
        lineno = line.split(", line ")[1].split(",")[0]
        code = lines[i + 1].strip() if i + 1 < len(lines) else ""
        best = f"{filename}:{lineno}: {code}"
    return best


def op_name(node: torch.fx.Node) -> str:
    """A readable name for a node's op: ``tw.latch``, ``torch.floor``, ``Tensor.float``,
    ``operator.add``; ``placeholder`` / ``output`` for the graph's ends."""
    if node.op in ("placeholder", "output", "get_attr"):
        return node.op
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    target = node.target
    module = getattr(target, "__module__", "") or ""
    name = getattr(target, "__name__", str(target))
    if module.startswith("torchwright_fx"):
        return f"tw.{name}"
    if module in ("_operator", "operator"):
        return f"operator.{name}"
    if module.startswith("torch"):
        return f"torch.{name}"
    return f"{module}.{name}" if module else name


def node_error(node: torch.fx.Node, what: str, advice: str = "", d_head: int | None = None
               ) -> CompileError:
    op = node.target if isinstance(node.target, str) else getattr(
        node.target, "__name__", str(node.target))
    msg = f"{node_source(node)}\n  in `{op}` ({node.name}): {what}"
    if advice:
        msg += f"\n  {advice}"
    return CompileError(msg) if d_head is None else HeadTooSmall(msg, d_head, what)
