"""Ways to fill the run rows of the components second pass, measured side
by side in whole calls (the prototype behind ``_string_stores``; kept as
the record of what was tried): ``regular``, the vector stores of
``_cpu_runs.fill_runs`` (``_cpu._second_pass``); ``nt``, the row built in
a scratch row and copied by non-temporal 64-byte stores; ``memcpy``, the
scratch row copied by the C library's ``memcpy``; ``movsb``, copied by one
``rep movsb``; ``stosd``, a ``rep stosl`` a segment straight into the row
(what landed, on Intel).  The 2048² (or given) fractal mask, 8-connected,
``nonzero`` mode, in the strips the kernel picks and in one; OpenCV
Spaghetti beside them; medians of interleaved rounds.  x86-64 only.

    taskset -c 0,1 .venv/bin/python bench/components_fill_variants.py 2048 41 [variants]
"""
import sys, time, statistics, os
import numpy as np
sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
from rasters import fractal_surface
import cv2
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from llvmlite import ir
import llvmlite.binding as llvm
llvm.initialize_native_asmparser()
from gridgraph.core.components import _cpu
from gridgraph.core.components._cpu_runs import unpack_runs, fill_runs

# each variant replaces _cpu._second_pass, which label() calls only then
_cpu.STRING_STORE_FILLS = False

@intrinsic
def _nt_store_line(typingctx, dst, dindex, src, sindex):
    def codegen(context, builder, sig, args):
        dst_t, _, src_t, _ = sig.args
        elem = context.get_value_type(dst_t.dtype)
        lanes = 64 // context.get_abi_sizeof(elem)
        vec = ir.VectorType(elem, lanes)
        d = context.make_array(dst_t)(context, builder, args[0])
        s = context.make_array(src_t)(context, builder, args[2])
        v = builder.load(builder.bitcast(builder.gep(s.data, [args[3]]), vec.as_pointer()), align=4)
        st = builder.store(v, builder.bitcast(builder.gep(d.data, [args[1]]), vec.as_pointer()), align=64)
        st.set_metadata("nontemporal", builder.module.add_metadata([ir.IntType(32)(1)]))
        return context.get_dummy_value()
    return types.void(dst, dindex, src, sindex), codegen

@intrinsic
def _sfence(typingctx):
    def codegen(context, builder, sig, args):
        fn = builder.module.declare_intrinsic("llvm.x86.sse.sfence", fnty=ir.FunctionType(ir.VoidType(), []))
        builder.call(fn, [])
        return context.get_dummy_value()
    return types.void(), codegen

@intrinsic
def _memcpy_row(typingctx, dst, src):
    """dst[:] = src[:] by llvm.memcpy (a call to the C library's memcpy)."""
    def codegen(context, builder, sig, args):
        dst_t, src_t = sig.args
        d = context.make_array(dst_t)(context, builder, args[0])
        s = context.make_array(src_t)(context, builder, args[1])
        n = builder.extract_value(d.shape, 0)
        size = builder.mul(n, ir.Constant(n.type, context.get_abi_sizeof(context.get_value_type(dst_t.dtype))))
        i8p = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(i8p, [i8p, i8p, size.type])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "memcpy")
        builder.call(fn, [builder.bitcast(d.data, i8p), builder.bitcast(s.data, i8p), size])
        return context.get_dummy_value()
    return types.void(dst, src), codegen

@intrinsic
def _rep_movsb_row(typingctx, dst, src):
    def codegen(context, builder, sig, args):
        dst_t, src_t = sig.args
        d = context.make_array(dst_t)(context, builder, args[0])
        s = context.make_array(src_t)(context, builder, args[1])
        n = builder.extract_value(d.shape, 0)
        size = builder.mul(n, ir.Constant(n.type, context.get_abi_sizeof(context.get_value_type(dst_t.dtype))))
        i8p = ir.IntType(8).as_pointer()
        i64 = ir.IntType(64)
        rt = ir.LiteralStructType([i8p, i8p, i64])
        asm = ir.InlineAsm(ir.FunctionType(rt, [i8p, i8p, i64]), "rep movsb",
                           "={di},={si},={cx},0,1,2,~{memory},~{dirflag},~{fpsr},~{flags}", side_effect=True)
        builder.call(asm, [builder.bitcast(d.data, i8p), builder.bitcast(s.data, i8p), size])
        return context.get_dummy_value()
    return types.void(dst, src), codegen

@intrinsic
def _rep_stosd(typingctx, dst, start, count, value):
    """dst[start:start+count] = value (int32 cells) by rep stosl."""
    def codegen(context, builder, sig, args):
        dst_t = sig.args[0]
        d = context.make_array(dst_t)(context, builder, args[0])
        i8p = ir.IntType(8).as_pointer()
        i64 = ir.IntType(64); i32 = ir.IntType(32)
        p = builder.bitcast(builder.gep(d.data, [args[1]]), i8p)
        cnt = builder.zext(args[2], i64) if args[2].type.width < 64 else args[2]
        val = builder.trunc(args[3], i32) if args[3].type.width > 32 else args[3]
        rt = ir.LiteralStructType([i8p, i64])
        asm = ir.InlineAsm(ir.FunctionType(rt, [i8p, i64, i32]), "rep stosl",
                           "={di},={cx},0,1,{ax},~{memory},~{dirflag},~{fpsr},~{flags}", side_effect=True)
        builder.call(asm, [p, cnt, val])
        return context.get_dummy_value()
    return types.void(dst, start, count, value), codegen

@njit(nogil=True, inline="always")
def stream_copy(dst, src):
    n = dst.size
    lane = 64 // dst.itemsize
    addr = dst.ctypes.data
    head = ((64 - (addr & 63)) & 63) // dst.itemsize
    if head > n: head = n
    for i in range(head):
        dst[i] = src[i]
    i = head
    while i + lane <= n:
        _nt_store_line(dst, i, src, i)
        i += lane
    for j in range(i, n):
        dst[j] = src[j]

def make_second(kind):
    @njit(nogil=True)
    def second(labels, final, run_rows, row_start, row_stop):
        runs = np.empty((labels.shape[1] // 3 + 1, 3), dtype=np.int64)
        row = np.empty(labels.shape[1], dtype=labels.dtype)
        for r in range(row_start, row_stop):
            cells = labels[r]
            if run_rows[r]:
                count = unpack_runs(cells, runs)
                for run in range(count):
                    runs[run, 2] = final[np.uint64(runs[run, 2])]
                if kind == 1:
                    fill_runs(row, runs, count); stream_copy(cells, row)
                elif kind == 2:
                    fill_runs(row, runs, count); _memcpy_row(cells, row)
                elif kind == 3:
                    fill_runs(row, runs, count); _rep_movsb_row(cells, row)
                elif kind == 4:
                    gap = 0
                    for run in range(count):
                        s = runs[run, 0]; e = runs[run, 1]
                        _rep_stosd(cells, gap, s - gap, 0)
                        _rep_stosd(cells, s, e - s, runs[run, 2])
                        gap = e
                    _rep_stosd(cells, gap, cells.size - gap, 0)
                else:
                    fill_runs(cells, runs, count)
                continue
            for col in range(cells.size):
                cells[col] = final[np.uint64(cells[col])]
        if kind == 1:
            _sfence()
    return second
variants = {"regular": _cpu._second_pass, "nt": make_second(1), "memcpy": make_second(2), "movsb": make_second(3), "stosd": make_second(4)}
size=int(sys.argv[1]); rounds=int(sys.argv[2]); only = sys.argv[3].split(",") if len(sys.argv) > 3 else list(variants)
s = fractal_surface((size, size), seed=2)
m = (s > np.median(s)).astype(np.uint8)
q=lambda f: None
for strips in (None, 1):
  for conn in (8,):
    def cv():
        cv2.setNumThreads(2)
        return cv2.connectedComponentsWithAlgorithm(m, conn, cv2.CV_32S, cv2.CCL_SPAGHETTI)[1]
    def mk(k):
        def f():
            _cpu._second_pass = variants[k]; return _cpu.label(m, None, conn, "nonzero", q, strips=strips)[0]
        return f
    calls = {k: mk(k) for k in only}
    ref = calls[only[0]]().copy()
    for k, c in calls.items(): assert np.array_equal(c(), ref), k
    calls["OpenCV"] = cv
    for c in calls.values(): c(); c()
    t={k:[] for k in calls}; keys=list(calls)
    for r in range(rounds):
        for k in (keys if r%2==0 else keys[::-1]):
            a0=time.perf_counter(); calls[k](); t[k].append(time.perf_counter()-a0)
    print(size, "fractal", conn, "strips", strips, " | ".join(f"{k} {statistics.median(v)*1e3:.3f}" for k,v in t.items()), flush=True)
