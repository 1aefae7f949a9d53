"""The weight-gradient kernels' index logic (kernels/wgrad_nchw.cu, wgrad_nhwc.cu) in numpy, for
tests/test_wgrad_cpu.py: every (block, thread) of stage 1 as the kernel walks it (lane groups
and shuffles along w for NCHW, channel lanes and column walks for NHWC, the staged entries' ring
of shared-memory rows), recording for every
product it accumulates the dW element, the output pixel (n, h, w) of dY and the X element read
(ZERO for padding); and the workspace elements each block writes. The launch (entry, grid,
block, scalars) is the host's plan (backward_kernels.wgrad_plan), not copied here."""
from __future__ import annotations

import numpy as np

ZERO = -1
UNSTAGED = -2  # a shared-memory word no stage wrote


def _split(index, n0, n1):
    return index % n0, (index // n0) % n1, index // n0 // n1


def _products(found, e, pix, xi, ok):
    found.append((e[ok], pix[ok], xi[ok]))


def emulate_nchw(plan, cob: int, cib: int):
    """(dW element, pixel n*H*W + h*W + w, X index) of every product, and the (slice, element)
    of every workspace write."""
    N, C_in, C_out, H, W, G, wt, seg, sps = plan.stage1.scalars
    tiles, slices, _ = plan.stage1.grid
    threads = plan.stage1.block[0]
    cig, cog = C_in // G, C_out // G
    ciblk, coblk = -(-cig // cib), -(-cog // cob)
    t = np.arange(threads)
    lane, w_local, group = t & 31, (t & 31) & (wt - 1), t // wt
    per_block = threads // wt
    col_blocks, row_segs = -(-W // wt), -(-H // seg)
    strips = N * col_blocks * row_segs
    iters = -(-sps // per_block)
    found, writes = [], []
    for bx in range(tiles):
        ci_b, co_b, g = _split(bx, ciblk, coblk)
        ci0, co0 = ci_b * cib, co_b * cob
        for by in range(slices):
            s_end = min(strips, by * sps + sps)
            for it in range(iters):
                strip = by * sps + group + it * per_block
                ok = strip < s_end
                cb, rs, n = _split(np.where(ok, strip, 0), col_blocks, row_segs)
                w = cb * wt + w_local
                for r in range(seg):
                    h = rs * seg + r
                    out_ok = ok & (w < W) & (h < H)
                    for i in range(cib):
                        ci = ci0 + i
                        for kh in range(3):
                            hr = h - 1 + kh
                            row_ok = ok & (hr >= 0) & (hr < H) & (ci < cig)
                            base = ((n * C_in + g * cig + ci) * H + hr) * W
                            centre = np.where(row_ok & (w < W), base + w, ZERO)
                            # shuffles: lane l - 1's centre and lane l + 1's (lane 0 and 31 their own)
                            left = np.where(lane == 0, centre, np.roll(centre, 1))
                            right = np.where(lane == 31, centre, np.roll(centre, -1))
                            left = np.where(w_local == 0, np.where(row_ok & (w > 0) & (w - 1 < W),
                                                                   base + w - 1, ZERO), left)
                            right = np.where(w_local == wt - 1, np.where(
                                row_ok & (w + 1 < W), base + w + 1, ZERO), right)
                            for kw, xi in enumerate((left, centre, right)):
                                for o in range(cob):
                                    co = g * cog + co0 + o
                                    e = ((co * cig + ci) * 3 + kh) * 3 + kw
                                    valid = out_ok & (co0 + o < cog) & (ci < cig)
                                    _products(found, np.full(threads, e), (n * H + h) * W + w,
                                              xi, valid)
            for o in range(cob):
                for i in range(cib):
                    if co0 + o < cog and ci0 + i < cig:
                        e0 = ((g * cog + co0 + o) * cig + ci0 + i) * 9
                        writes += [(by, e0 + k) for k in range(9)]
    return found, writes


def emulate_nhwc(plan, choice: dict):
    """As emulate_nchw, for the channels_last kernels (depthwise and channel tiles)."""
    N, C_in, C_out, H, W, G, _, seg, sps = plan.stage1.scalars
    blocks, slices, _ = plan.stage1.grid
    lanes, per_block, _ = plan.stage1.block
    cig, cog = C_in // G, C_out // G
    rows = choice["rows"]
    depthwise = "vec" in choice
    vec = choice.get("vec", 1)
    cob, cib = (1, 1) if depthwise else (choice["cob"], choice["cib"])
    ciblk, coblk = -(-cig // cib), -(-cog // cob)
    count = C_in // vec if depthwise else G * ciblk * coblk
    row_blocks, col_segs = -(-H // rows), -(-W // seg)
    strips = N * row_blocks * col_segs
    iters = -(-sps // per_block)
    tx, ty = np.meshgrid(np.arange(lanes), np.arange(per_block), indexing="ij")
    tx, ty = tx.ravel(), ty.ravel()
    found, writes = [], []
    for bx in range(blocks):
        unit = bx * lanes + tx
        unit_ok = unit < count
        # (output channel, input channel, its index in the group, whether the tile holds it)
        if depthwise:  # lane j of vector `unit`: channel unit*vec + j, its own group
            chans = [(unit * vec + j, unit * vec + j, 0, unit_ok) for j in range(vec)]
        else:
            ci_b, co_b, g = _split(np.where(unit_ok, unit, 0), ciblk, coblk)
            chans = [(g * cog + co_b * cob + o, g * cig + ci_b * cib + i, ci_b * cib + i,
                      unit_ok & (co_b * cob + o < cog) & (ci_b * cib + i < cig))
                     for o in range(cob) for i in range(cib)]
        for by in range(slices):
            s_end = min(strips, by * sps + sps)
            for it in range(iters):
                strip = by * sps + ty + it * per_block
                ok = unit_ok & (strip < s_end)
                cs, rb, n = _split(np.where(ok, strip, 0), col_segs, row_blocks)
                h0, w0 = rb * rows, cs * seg
                for step in range(seg):
                    w = w0 + step
                    step_ok = ok & (w < np.minimum(W, w0 + seg))
                    for r in range(rows):
                        h = h0 + r
                        out_ok = step_ok & (h < H)
                        for co, ci, ci_local, held in chans:
                            for kh in range(3):
                                for kw in range(3):
                                    hr, wc = h - 1 + kh, w - 1 + kw
                                    inside = (hr >= 0) & (hr < H) & (wc >= 0) & (wc < W)
                                    xi = np.where(inside, ((n * C_in + ci) * H + hr) * W + wc, ZERO)
                                    e = ((co * cig + ci_local) * 3 + kh) * 3 + kw
                                    _products(found, e, (n * H + h) * W + w, xi, out_ok & held)
            # the block's reduction writes: lane e of the block's units, each valid pair
            for lane in range(lanes):
                u = bx * lanes + lane
                if u >= count:
                    continue
                if depthwise:
                    writes += [(by, (u * vec + j) * 9 + k) for j in range(vec) for k in range(9)]
                    continue
                ci_b, co_b, g = (int(v) for v in _split(u, ciblk, coblk))
                for o in range(cob):
                    for i in range(cib):
                        if co_b * cob + o < cog and ci_b * cib + i < cig:
                            e0 = ((g * cog + co_b * cob + o) * cig + ci_b * cib + i) * 9
                            writes += [(by, e0 + k) for k in range(9)]
    return found, writes


def emulate_nhwc_staged(plan):
    """As emulate_nchw, for the staged channels_last entries (wg_nhwc_smem_o{COW}): a block's
    strips one at a time (rows fastest), input rows staged into a ring of three shared-memory rows
    (X indices here, ZERO outside the map or past the group's channels, UNSTAGED where no stage
    wrote), kept while the strips slide down one image's rows and restaged where they do not."""
    N, C_in, C_out, H, W, G, _, seg, sps = plan.stage1.scalars
    blocks, slices, _ = plan.stage1.grid
    lanes, warps, _ = plan.stage1.block
    cig, cog = C_in // G, C_out // G
    chunk = warps * plan.choice["staged_co"]
    ci_chunks, co_chunks = -(-cig // lanes), -(-cog // chunk)
    strips = N * H * -(-W // seg)
    lane, outs = np.arange(lanes), np.arange(chunk)  # threadIdx.x; warp * COW + o
    found, writes = [], []
    for bx in range(blocks):
        cic, coc, g = _split(bx, ci_chunks, co_chunks)
        ci0, co0 = cic * lanes, coc * chunk
        ci_ok, co_ok = ci0 + lane < cig, co0 + outs < cog
        held = (co_ok[:, None] & ci_ok[None, :]).ravel()
        e0 = ((g * cog + co0 + outs)[:, None] * cig + (ci0 + lane)[None, :]) * 9
        chan = g * cig + ci0 + lane
        for by in range(slices):
            xs = np.full((3, seg + 2, lanes), UNSTAGED)

            def stage(n, hh, w0):
                for col in range(seg + 2):
                    ww = w0 - 1 + col
                    inside = 0 <= hh < H and 0 <= ww < W
                    x_index = ((n * C_in + chan) * H + hh) * W + ww
                    xs[(hh + 3) % 3, col] = np.where(inside & ci_ok, x_index, ZERO)

            prev = (-1, -1, -2)
            for s in range(by * sps, min(strips, by * sps + sps)):
                h, n, cs = _split(s, H, N)
                w0 = cs * seg
                if (n, cs) != prev[:2] or h != prev[2] + 1:
                    stage(n, h - 1, w0)
                    stage(n, h, w0)
                stage(n, h + 1, w0)
                slots = ((h + 2) % 3, h % 3, (h + 1) % 3)  # rows h - 1, h, h + 1
                cols = min(seg, W - w0)
                # every warp slides along all the strip's columns (the warps differ in output
                # channels)
                for w in range(cols):
                    pix = np.full(held.size, (n * H + h) * W + w0 + w)
                    for kh in range(3):
                        for kw in range(3):
                            xi = np.broadcast_to(xs[slots[kh], w + kw], (chunk, lanes)).ravel()
                            _products(found, (e0 + kh * 3 + kw).ravel(), pix, xi, held)
                prev = (n, cs, h)
            writes += [(by, e + k) for e in e0.ravel()[held] for k in range(9)]
    return found, writes


def expected_x(shape, e: np.ndarray, pix: np.ndarray) -> np.ndarray:
    """The X element the definition pairs with dY pixel `pix` for dW element `e` (ZERO outside)."""
    cig, cog = shape.cin_per_group, shape.cout_per_group
    t, rest = e % 9, e // 9
    ci, co = rest % cig, rest // cig
    kh, kw = t // 3, t % 3
    w, h, n = pix % shape.w, (pix // shape.w) % shape.h, pix // shape.w // shape.h
    hr, wc = h - 1 + kh, w - 1 + kw
    inside = (hr >= 0) & (hr < shape.h) & (wc >= 0) & (wc < shape.w)
    c = co // cog * cig + ci
    return np.where(inside, ((n * shape.c_in + c) * shape.h + hr) * shape.w + wc, ZERO)


def check(shape, found, writes, slices: int) -> None:
    """Every dW element receives every (n, h, w) contribution exactly once, each with the X
    element the definition names; every workspace element of every slice is written once."""
    e = np.concatenate([f[0] for f in found])
    pix = np.concatenate([f[1] for f in found])
    xi = np.concatenate([f[2] for f in found])
    pixels = shape.n * shape.h * shape.w
    counts = np.bincount(e * pixels + pix, minlength=shape.weight_elems * pixels)
    assert counts.size == shape.weight_elems * pixels, "a product lands past dW's end"
    assert counts.min() == 1 and counts.max() == 1, \
        f"contributions not exactly once: {np.count_nonzero(counts == 0)} missing, " \
        f"{np.count_nonzero(counts > 1)} repeated"
    assert np.array_equal(xi, expected_x(shape, e, pix)), "a product read the wrong X element"
    z, idx = np.array(writes).T
    written = np.bincount(z * shape.weight_elems + idx, minlength=slices * shape.weight_elems)
    assert written.size == slices * shape.weight_elems and written.min() == written.max() == 1, \
        "workspace elements not written exactly once per slice"


def emulate_reduce(launch, chains: int):
    """Stage 2 (wg_reduce, kernels/wgrad_common.cuh) as its threads walk it: for each dW element,
    the slices it adds, as (lane y, chain k, slice z) in the order the sum is taken (lanes in y
    order; within a lane the chains in k order, each chain's slices in increasing z). The launch
    (grid, block, scalars) is the host's plan; returns {element: [slice, ...]}."""
    elems, slices = launch.scalars
    rx, ry, _ = launch.block
    order = {}
    for bx in range(launch.grid[0]):
        for tx in range(rx):
            e = bx * rx + tx
            if e >= elems:
                continue
            taken = []
            for y in range(ry):
                chain = [[] for _ in range(chains)]
                z = y
                while z + (chains - 1) * ry < slices:
                    for k in range(chains):
                        chain[k].append(z + k * ry)
                    z += chains * ry
                for k in range(chains - 1):
                    if z + k * ry < slices:
                        chain[k].append(z + k * ry)
                taken += [s for c in chain for s in c]
            order[e] = taken
    return order


def check_reduce(order: dict, elems: int, slices: int) -> list:
    """Every element of dW takes every slice exactly once, all in one order; returns that order."""
    assert sorted(order) == list(range(elems)), "stage 2 leaves elements out or adds some"
    first = order[0]
    assert sorted(first) == list(range(slices)), "stage 2 does not add every slice exactly once"
    assert all(o == first for o in order.values()), "stage 2's order differs between elements"
    return first
