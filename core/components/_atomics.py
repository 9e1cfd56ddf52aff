"""Atomic operations on integer array elements, and the steps of a
spin-wait, for compiled code shared by threads (:mod:`._cpu_team`).

Numba has no CPU atomics; these are LLVM's (``atomicrmw``, atomic loads and
stores), which every target numba supports lowers to the CPU's own
instructions (``lock xadd`` and plain moves on x86-64).  They order the
plain loads and stores around them (sequentially consistent): what a thread
wrote before a :func:`store` (or an :func:`add`) is seen by a thread that
reads the value with :func:`load` (or an :func:`add`).  A thread that waits
long sleeps on a counter (:func:`sleep_while_equal`, Linux futexes) until a
thread that changed it wakes it (:func:`wake_all`).
"""

import os
import platform

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ._string_stores import _asm_parser_ready

_MACHINE = platform.machine().lower()


def _integer_array(array):
    return (isinstance(array, types.Array) and array.layout == "C"
            and isinstance(array.dtype, types.Integer)
            and array.dtype.bitwidth in (32, 64))


def _element_pointer(context, builder, array_type, array, index):
    made = context.make_array(array_type)(context, builder, array)
    return cgutils.get_item_pointer(context, builder, array_type, made,
                                    [index])


@intrinsic
def add(typingctx, array, index, value):
    """``array[index] += value`` atomically; returns the value before."""
    if not (_integer_array(array) and array.ndim == 1
            and isinstance(index, types.Integer)
            and isinstance(value, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        pointer = _element_pointer(context, builder, signature.args[0],
                                   args[0], args[1])
        value = context.cast(builder, args[2], signature.args[2],
                             signature.args[0].dtype)
        return builder.atomic_rmw("add", pointer, value, "seq_cst")
    return array.dtype(array, index, value), codegen


@intrinsic
def load(typingctx, array, index):
    """``array[index]``, read atomically (never kept in a register: a loop
    reads it again each time)."""
    if not (_integer_array(array) and array.ndim == 1
            and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        pointer = _element_pointer(context, builder, signature.args[0],
                                   args[0], args[1])
        return builder.load_atomic(pointer, "seq_cst",
                                   signature.args[0].dtype.bitwidth // 8)
    return array.dtype(array, index), codegen


@intrinsic
def store(typingctx, array, index, value):
    """``array[index] = value``, written atomically, after every store
    before it."""
    if not (_integer_array(array) and array.ndim == 1
            and isinstance(index, types.Integer)
            and isinstance(value, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        pointer = _element_pointer(context, builder, signature.args[0],
                                   args[0], args[1])
        value = context.cast(builder, args[2], signature.args[2],
                             signature.args[0].dtype)
        builder.store_atomic(value, pointer, "seq_cst",
                             signature.args[0].dtype.bitwidth // 8)
        return context.get_dummy_value()
    return types.void(array, index, value), codegen


@intrinsic
def spin_pause(typingctx):
    """A spin-wait loop's hint to the core (x86 ``pause``, Arm ``yield``):
    it spends less power and leaves a sibling hyperthread the core; nothing
    on other targets."""
    def codegen(context, builder, signature, args):
        hint = {"x86_64": "pause", "amd64": "pause", "aarch64": "yield",
                "arm64": "yield"}.get(_MACHINE)
        if hint is not None:
            _asm_parser_ready()
            builder.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []),
                                      hint, "~{memory}", side_effect=True),
                         [])
        return context.get_dummy_value()
    return types.void(), codegen


# Linux's futex system call: its number here, None where there is none
_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98}.get(_MACHINE) \
    if os.name == "posix" and platform.system() == "Linux" else None
_FUTEX_WAIT_PRIVATE = 128
_FUTEX_WAKE_PRIVATE = 129
FUTEX_HERE = _FUTEX is not None


def _syscall(builder, arguments):
    function = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.IntType(64), [ir.IntType(64)],
                                        var_arg=True), "syscall")
    return builder.call(function, arguments)


@intrinsic
def sleep_while_equal(typingctx, array, index, expected, timeout):
    """Sleep while the low 32 bits of ``array[index]`` (an int64 array,
    little-endian) equal those of ``expected``, at most ``timeout``: a
    ``timespec`` (an int64 array of seconds and nanoseconds); woken by
    :func:`wake_all`.  Returns at once where there is no futex (then
    :func:`wait_step` yields instead)."""
    if not (_integer_array(array) and array.ndim == 1
            and array.dtype.bitwidth == 64
            and isinstance(index, types.Integer)
            and isinstance(expected, types.Integer)
            and _integer_array(timeout) and timeout.ndim == 1):
        return None

    def codegen(context, builder, signature, args):
        if _FUTEX is not None:
            word = ir.IntType(64)
            pointer = _element_pointer(context, builder, signature.args[0],
                                       args[0], args[1])
            limit = context.make_array(signature.args[3])(context, builder,
                                                          args[3]).data
            value = builder.and_(context.cast(
                builder, args[2], signature.args[2], types.int64),
                ir.Constant(word, 0xFFFFFFFF))
            _syscall(builder, [
                ir.Constant(word, _FUTEX), builder.ptrtoint(pointer, word),
                ir.Constant(word, _FUTEX_WAIT_PRIVATE), value,
                builder.ptrtoint(limit, word), ir.Constant(word, 0),
                ir.Constant(word, 0)])
        return context.get_dummy_value()
    return types.void(array, index, expected, timeout), codegen


@intrinsic
def wake_all(typingctx, array, index):
    """Wake every thread sleeping on ``array[index]``
    (:func:`sleep_while_equal`)."""
    if not (_integer_array(array) and array.ndim == 1
            and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        if _FUTEX is not None:
            word = ir.IntType(64)
            pointer = _element_pointer(context, builder, signature.args[0],
                                       args[0], args[1])
            _syscall(builder, [
                ir.Constant(word, _FUTEX), builder.ptrtoint(pointer, word),
                ir.Constant(word, _FUTEX_WAKE_PRIVATE),
                ir.Constant(word, 2**31 - 1), ir.Constant(word, 0),
                ir.Constant(word, 0), ir.Constant(word, 0)])
        return context.get_dummy_value()
    return types.void(array, index), codegen


@intrinsic
def yield_thread(typingctx):
    """Give the core to another runnable thread, if any (``sched_yield``;
    returns at once when none waits; nothing off POSIX systems)."""
    def codegen(context, builder, signature, args):
        if os.name == "posix":
            function = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.IntType(32), []),
                "sched_yield")
            builder.call(function, [])
        return context.get_dummy_value()
    return types.void(), codegen
