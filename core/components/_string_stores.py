"""Run rows filled by x86 string stores (``rep stos``), where the CPU makes
them fast: the second pass of :mod:`._cpu` writes each row labelled by
runs from its run list, a segment (gap or run) at a time.

A plain store to a cache line the core does not hold first reads the line
(a read for ownership), so a row of fresh labels costs a read and a write
of memory.  Intel's cores run ``rep stos`` by microcode that writes whole
lines without reading them (ERMSB, "fast strings").  Measured in one
process on the GPU machine's Xeon (two threads, the 2048² fractal mask,
8-connected, interleaved rounds; 2026-12-03), whole labellings: on a host
whose fill was slow, 3.64 and 3.43 ms with the vector stores of
:func:`._cpu_runs.fill_runs` against 3.14 and 2.81 ms with a string
store a segment (one thread 5.93 and 5.39 against 4.85 and 3.96 ms;
4096² 10.6 and 10.9 against 9.9 and 9.5 ms); on two faster hosts +3.2 %
and -0.6 % (other fractal rows -4.9 to +3.1 %, random masks -0.9 to
+2.3 %, one thread up to +9.6 %).  On the 2-core box's AMD EPYC
(Zen 5) the same string stores were slower (2048², two threads: 1.66
against 2.28 ms; one thread 1.90 against 2.59 ms), so they are used on
Intel x86-64 CPUs only (:func:`fast_here`).  ``bench/components_fill.py``
times both.
"""

import platform

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

_X86_64 = platform.machine().lower() in ("x86_64", "amd64")


def cpu_vendor(cpuinfo="/proc/cpuinfo"):
    """The CPU's vendor string (``GenuineIntel``, ``AuthenticAMD``, ...) on
    x86-64, from ``cpuinfo`` (Linux) or ``platform.processor()``
    (Windows: "Intel64 Family 6 Model 85 Stepping 7, GenuineIntel"); None
    elsewhere or when neither says."""
    if not _X86_64:
        return None
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as lines:
            for line in lines:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    described = platform.processor()
    for vendor in ("GenuineIntel", "AuthenticAMD", "HygonGenuine"):
        if vendor in described:
            return vendor
    return None


def fast_here():
    """Whether run rows are filled by string stores on this CPU: Intel
    x86-64 (measured faster there, slower on AMD Zen 5; see above)."""
    return cpu_vendor() == "GenuineIntel"


_ASM_PARSER = []


def _asm_parser_ready():
    # LLVM assembles inline asm only with the target's asm parser, which
    # numba does not initialise (a cached compile needs none)
    if not _ASM_PARSER:
        import llvmlite.binding as llvm
        llvm.initialize_native_asmparser()
        _ASM_PARSER.append(True)


@intrinsic
def _store_repeated(typingctx, cells, start, count, value):
    """``cells[start:start + count] = value`` for a C-contiguous 1-D array
    of 4- or 8-byte integers (``start`` and ``count`` unsigned, in range):
    one ``rep stosl`` / ``rep stosq`` on x86-64, a plain loop elsewhere
    (where nothing calls it, but every target compiles it)."""
    if not (isinstance(cells, types.Array) and cells.ndim == 1
            and cells.layout == "C" and isinstance(cells.dtype, types.Integer)
            and cells.dtype.bitwidth in (32, 64)):
        return None

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder,
                                                       args[0])
        element = context.get_value_type(signature.args[0].dtype)
        first = builder.gep(array.data, [args[1]])
        value = context.cast(builder, args[3], signature.args[3],
                             signature.args[0].dtype)
        count = args[2]
        if _X86_64:
            _asm_parser_ready()
            pointer = first.type
            word = ir.IntType(64)
            suffix = "l" if element.width == 32 else "q"
            # rdi and rcx are advanced by the instruction: tied outputs;
            # the direction flag is clear by the ABI
            store = ir.InlineAsm(
                ir.FunctionType(ir.LiteralStructType([pointer, word]),
                                [pointer, word, element]),
                "rep stos" + suffix,
                "={di},={cx},0,1,{ax},~{memory},~{dirflag},~{fpsr},~{flags}",
                side_effect=True)
            builder.call(store, [first, builder.zext(count, word)
                                 if count.type.width < 64 else count, value])
            return context.get_dummy_value()
        with cgutils.for_range(builder, count) as loop:
            builder.store(value, builder.gep(first, [loop.index]))
        return context.get_dummy_value()
    return types.void(cells, start, count, value), codegen


@njit(cache=True, nogil=True, inline="always")
def fill_runs_by_string_stores(out, runs, count):
    """:func:`._cpu_runs.fill_runs` by a string store a segment: 0 in the
    gaps (none where runs touch), each run's label along it."""
    size = out.size
    gap_start = 0
    for run in range(count):
        start = runs[run, 0]
        stop = runs[run, 1]
        if start > gap_start:  # `equal` mode's runs touch: no gap
            _store_repeated(out, gap_start, start - gap_start, 0)
        _store_repeated(out, start, stop - start, runs[run, 2])
        gap_start = stop
    if size > gap_start:
        _store_repeated(out, gap_start, size - gap_start, 0)
