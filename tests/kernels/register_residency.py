#!/usr/bin/env python3
"""Checks that the linear and attention kernels' hot loops keep their accumulators in registers.

A tile kernel whose innermost loop loads or stores a vector register from or to the stack (a
spill, or an accumulator array the compiler keeps in memory) runs core-bound: on Zen 4 that cost
FP8 30 points of bandwidth share (issue #11). This disassembles the kernel library (objdump) and,
in every function of the families below, finds the innermost loops (a backward jump and its
target, holding no other loop) that do vector arithmetic and counts the spills in them: vector
stores to an %rsp/%rbp-based slot, and vector loads of slots the loop also stores. A load of a slot
written only before the loop is a loop-invariant operand (a constant the register allocator
parked in L1): it costs a load but no store/reload chain, so it is not counted.

REQUIRED families must have none: they are register-resident today at -O2 and -O3 (GCC 12), and a
change that makes them spill fails here. Nor may they copy a vector register through the stack
anywhere (vector_copies_through_stack): the multi-row tiles park their accumulators between K
chunks by design, but not twice over. The GEMM micro-kernels, called once per K chunk and
activation tile, must not touch the stack with a vector register anywhere: GCC once kept a stack
copy of the whole tile beside the registers on entry and exit, outside any loop, which cost the
M = 512 GEMMs 7-11%. A loop that loads a vector from an address it also stores (an accumulator
array in memory behind any register) counts as spilling too. Every other kernel function is
reported, so the output is also the to-do list. Usage: register_residency.py LIBRARY.a [--report]
"""
import pathlib
import re
import subprocess
import sys

# Demangled-name patterns (after the cleanup in short_name).
REQUIRED = {
    "AVX-512 vdpbf16ps GEMV tiles": re.compile(r"^TileDp(Interleaved)?<"),
    "AVX-512 interleaved multi-row tiles": re.compile(r"^TileInterleavedRows<"),
    "AVX-512 interleaved BF16 FMA GEMV tile": re.compile(r"^TileFmaInterleavedBf16$"),
    "AVX-512 FP4 FMA GEMV tiles": re.compile(r"^TileFma<FP4Row32,"),
    "AVX-512 fp32 GEMM micro-kernel": re.compile(r"^Micro<float>"),
    "AVX-512 vdpbf16ps GEMM micro-kernels": re.compile(r"^(MicroDpMx4<|Micro<unsigned int>)"),
    "AVX2 GEMM tiles": re.compile(r"^GemmTile<"),
    # FP8's 1 x 6 tile with the NaN-code check spills 3-4 vector operations a group (its decode's
    # constants and the check's register besides 12 accumulators; reported below).
    "AVX2 streaming group tiles": re.compile(
        r"^GroupTile<((FP4Row32|BF16|F32), \d, \d|FP8Block32, (1, [1-5]|2, [12])|FP8Block32, 1, 6, false)(, (true|false))?>"),
    "AVX2 half-major streaming tiles": re.compile(r"^HalfGroupTile<"),
    "attention q.k tiles and P.V sums": re.compile(r"^(DotTile|DotQuarter|WeightedSumForHeads|WeightedSumColumns)<"),
}
# Families checked over the whole function, not only its innermost loops.
WHOLE_FUNCTION = {"AVX-512 fp32 GEMM micro-kernel", "AVX-512 vdpbf16ps GEMM micro-kernels"}
KERNEL = re.compile(r"^(Tile|GroupTile|HalfGroupTile|TileDp|TileDpInterleaved|TileInterleavedRows|TileFma|TileFmaInterleavedBf16|MicroDpMx4|MicroMx4|Micro|Stream|StreamRowsT|GemmTile|PanelRowsT|PanelRows|DotTile|DotQuarter|WeightedSumForHeads|WeightedSumColumns)\b")


def matrix_formats():
    """Enumerator names of MatrixFormat by value ("3" -> "FP4Row32"), read from its one definition."""
    header = pathlib.Path(__file__).resolve().parents[2] / "src/io/weight_matrix.h"
    m = re.search(r"enum class MatrixFormat \{([^}]*)\}", header.read_text())
    if not m:
        sys.exit(f"{header}: no 'enum class MatrixFormat {{...}}' (update the check)")
    return {str(i): name.strip()[1:] for i, name in enumerate(m.group(1).split(","))}


FORMATS = matrix_formats()

FUNCTION = re.compile(r"^[0-9a-f]+ <(.*)>:$")
MEMBER = re.compile(r"^(\S+?)(\.cc)?\.o:\s+file format")
INSTRUCTION = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
JUMP = re.compile(r"^j[a-z]+$")
STACK_VECTOR = re.compile(r"%[xyz]mm\d+.*\((%rsp|%rbp)|\((%rsp|%rbp)[^)]*\).*%[xyz]mm\d+")
ARITHMETIC = re.compile(r"^(vdpbf16ps|vfn?m(add|sub)(132|213|231)p[sd]|vmulp[sd]|vaddp[sd])$")
MEMORY = re.compile(r"(?:-?0x[0-9a-f]+|\d+)?\(%[a-z0-9]+(?:,%[a-z0-9]+)?(?:,\d)?\)")
VECTOR_MEMORY = re.compile(r"%[xyz]mm\d+")
STACK_SLOT = re.compile(r"(-?0x[0-9a-f]+|\d+)?\((%rsp|%rbp)[^)]*\)")


def short_name(demangled):
    name = re.sub(r"\(deepinfer::MatrixFormat\)(\d)", lambda m: FORMATS[m.group(1)], demangled)
    name = re.sub(r"deepinfer::|\(anonymous namespace\)::|linear_simd::", "", name)
    name = re.sub(r"^void ", "", name)
    depth, out = 0, ""
    for c in name:  # drop the parameter list: the first '(' outside template brackets
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            break
        out += c
    clone = " [clone]" if "[clone" in name else ""
    return out.strip() + clone


def functions(library):
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", library], capture_output=True, text=True,
                          check=True).stdout
    member, name, body = "", None, []
    for line in text.splitlines():
        m = MEMBER.match(line)
        if m:
            member = m.group(1)
            continue
        m = FUNCTION.match(line)
        if m:
            if name:
                yield member, name, body
            name, body = m.group(1), []
            continue
        m = INSTRUCTION.match(line)
        if m and name:
            body.append((int(m.group(1), 16), m.group(2), m.group(3)))
    if name:
        yield member, name, body


def stack_vector_ops_in_innermost_loops(body):
    loops = []
    for address, op, args in body:
        target = re.match(r"([0-9a-f]+)", args)
        if JUMP.match(op) and target and int(target.group(1), 16) <= address:
            loops.append((int(target.group(1), 16), address))
    innermost = [(lo, hi) for lo, hi in loops
                 if not any((lo2, hi2) != (lo, hi) and lo <= lo2 and hi2 <= hi for lo2, hi2 in loops)]
    # Only the loops that do the kernel's arithmetic are hot: a loop that parks or restores
    # accumulators between K chunks (TileInterleavedRows; at -O2 GCC lays it out as a loop of
    # its own) moves them through memory by design.
    innermost = [(lo, hi) for lo, hi in innermost
                 if any(lo <= address <= hi and ARITHMETIC.match(op) for address, op, _ in body)]
    spills = []
    for lo, hi in innermost:
        ops = [(op, args) for address, op, args in body if lo <= address <= hi and STACK_VECTOR.search(args)]
        # AT&T syntax: the destination is the last operand, so a store ends with the stack slot.
        stored = {STACK_SLOT.search(args).group(0) for op, args in ops if STACK_SLOT.search(args.split(",")[-1])}
        spills += [(op, args) for op, args in ops if STACK_SLOT.search(args).group(0) in stored]
        # An accumulator array kept in memory behind another register (GCC at -O2 left a
        # micro-kernel's loops rolled, its tile in a stack array addressed through %rcx): a vector
        # register loaded from and stored back to the same address in one pass of the loop.
        vector = [args for address, op, args in body if lo <= address <= hi and VECTOR_MEMORY.search(args)]
        written = {args.split(",")[-1] for args in vector if MEMORY.search(args.split(",")[-1])}
        spills += [("load of an address the loop stores", args) for args in vector
                   if not MEMORY.search(args.split(",")[-1]) and any(m in written for m in MEMORY.findall(args))]
    return spills


VECTOR_MOVE = re.compile(r"^vmov(aps|ups|apd|upd|dqa(32|64)?|dqu(8|16|32|64)?)$")
VECTOR_REGISTER = re.compile(r"%[xyz]mm\d+")


def vector_copies_through_stack(body):
    """Vector registers loaded from a stack slot and stored, untouched, to memory: a whole tile
    copied through the stack (GCC, short of registers where the tile left its loop, once parked
    every accumulator in a stack copy and then copied that to its place at every K chunk's end:
    BF16 M = 6 ran 30% slower). A slot that is loaded into arithmetic is not counted."""
    copies, pending = [], {}
    for _, op, args in body:
        operands = args.split(",")
        if VECTOR_MOVE.match(op) and len(operands) >= 2:
            source, destination = ",".join(operands[:-1]), operands[-1]
            if VECTOR_REGISTER.fullmatch(source.strip()) and MEMORY.search(destination) and source.strip() in pending:
                copies.append(f"{op} {pending.pop(source.strip())} -> {destination}")
                continue
            if STACK_SLOT.search(source) and VECTOR_REGISTER.fullmatch(destination.strip()):
                pending[destination.strip()] = source
                continue
        for register in VECTOR_REGISTER.findall(args):
            pending.pop(register, None)
    return copies


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    report = "--report" in sys.argv[2:]
    found = {family: 0 for family in REQUIRED}
    failures, others = [], []
    for member, demangled, body in functions(sys.argv[1]):
        name = short_name(demangled)
        if not KERNEL.match(name):
            continue
        ops = stack_vector_ops_in_innermost_loops(body)
        copies = vector_copies_through_stack(body)
        families = [f for f, pattern in REQUIRED.items() if pattern.match(name)]
        for family in families:
            found[family] += 1
        anywhere = [(op, args) for _, op, args in body if STACK_VECTOR.search(args)]
        if any(f in WHOLE_FUNCTION for f in families) and anywhere:
            failures.append(f"{member}: {name} ({families[0]}): {len(anywhere)} vector stack ops, e.g. "
                            f"{anywhere[0][0]} {anywhere[0][1]}")
        elif families and copies:
            failures.append(f"{member}: {name} ({families[0]}): {len(copies)} vector copies through the stack, "
                            f"e.g. {copies[0]}")
        elif families and ops:
            failures.append(f"{member}: {name} ({families[0]}): {len(ops)} spilled vector ops in its innermost loops, "
                            f"e.g. {ops[0][0]} {ops[0][1]}")
        elif not families:
            others.append(f"{len(ops):4d}  {member}: {name}")
    missing = [family for family, count in found.items() if count == 0]
    for family in missing:
        failures.append(f"no function of the required family '{family}' in {sys.argv[1]} (renamed? update the check)")
    print(f"required register-resident kernels: {sum(found.values())} functions in {len(REQUIRED)} families")
    if report or failures:
        print("other kernel functions (spilled vector ops in innermost loops, name):")
        print("\n".join(sorted(others, key=lambda line: line[4:])))
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
