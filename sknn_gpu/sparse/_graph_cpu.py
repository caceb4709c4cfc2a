"""CPU engine of :class:`~sknn_gpu.sparse.SparseGraph`: NumPy/SciPy, the reference.

Same functions and signatures as the CUDA engine (``_graph_cuda``), same results (float64;
the kernels use the same formulas). Node values are the node-major matrix ``V`` of shape
``(n_slots, batch)`` described in ``_graph``.

Evaluation (``forward`` without ``keep_values``): one SciPy CSR x dense product per level
for the whole batch, then the activations. A sample's sums do not depend on the batch: a
row predicted alone gets the bits it gets in any batch.

Training (``forward(..., keep_values=True)`` and ``backward``) works on the blocks of
:func:`_layout`: the rows of a level, cut so that the rectangle of (rows x the slots they
read) stays under :data:`BLOCK_BYTES`. A block runs as a dense matrix (zeros where no edge)
through BLAS where that costs less than the sparse products for the batch at hand (the
costs below), for the three products an MLP layer makes per step: ``W @ V`` forward,
``D @ V.T`` for the weight gradient (entries taken at the edges) and ``W.T @ D`` for the
gradient of the hidden nodes it reads. A layered network's layers are fully dense blocks
whose weights are the plan's weights reshaped, with no copy. Other blocks run the C kernels
of ``_kernels/sparsenet.c`` (sparse products over the block's edges, and the weight gradient
at the edges only), compiled on first use (:func:`sknn_gpu._kernels._cpu.cpu_library`);
without a C compiler, SciPy CSR products and per-edge dot products in NumPy. The sums are
the same; only their order differs from the evaluation's (rounding, about 1e-16 relative
per product).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._backend import SMALL_WORK_BYTES, check_memory
from .._kernels._cpu import cpu_library
from ._activations import ACTIVATIONS, activation, activation_derivative, apply_activation, derivative

__all__ = ["forward", "backward"]

# Costs on one core (float64, ns) that pick each block's method per call, from its rectangle
# (rows x the slots they read), its edges and the batch. A dense product costs DENSE_NS per
# (row, slot, sample) plus DENSE_CALL_NS (the weights scattered into the rectangle). A sparse
# product costs ``csr`` per (edge, sample) plus ``csr_call``, the weight gradient at the
# edges ``gather`` per (edge, sample) plus ``gather_call``: with the C kernels (a block is
# dense from a fill of a quarter: BLAS's rate per multiply-add was 2.8-4.5x the kernels' on
# the 2-core EPYC benchmark host, 3.4-5.6x on the 16-core Xeon host of the GPU machine), or with
# SciPy's CSR product and NumPy's per-edge dot products (two rows gathered per edge; dense
# from a fill of 20% and 5%). A small block is dense below that too, where the call costs
# dominate. BLAS threads are not counted: at a minibatch's size these products gained
# little from them (nothing at batch 200 on the 16-core host), and the sparse kernels run
# on one. The rates: ``benchmarks/bench_sparsenet.py --cpu-train`` (its first tables).
DENSE_NS, DENSE_CALL_NS = 0.05, 2_000.0
COSTS = {
    "c": dict(csr=0.2, csr_call=3_000.0, gather=0.2, gather_call=3_000.0),
    "numpy": dict(csr=0.25, csr_call=4_000.0, gather=1.0, gather_call=5_000.0),
}

#: Largest dense block (bytes of its rows x slots rectangle); larger levels are cut by rows.
BLOCK_BYTES = 4 << 20

#: Bytes of the two gathered (edge, sample) arrays of a sparse block's weight gradient at once
#: (a few MiB: larger chunks leave the cache and cost page faults, 4x slower at 32 MiB).
GATHER_BYTES = 4 << 20


# --------------------------------------------------------------------------- evaluation
def _level_matrix(plan, w, level, n_slots):
    lp, indptr = plan["level_ptr"], plan["indptr"]
    r0, r1 = int(lp[level]), int(lp[level + 1])
    e0, e1 = int(indptr[r0]), int(indptr[r1])
    return (
        r0,
        r1,
        sp.csr_matrix((w[e0:e1], plan["indices"][e0:e1], indptr[r0 : r1 + 1] - e0), shape=(r1 - r0, n_slots)),
    )


def forward(graph, X, executor="auto", w=None, b=None, keep_values=False, check_finite=False, rows=None):
    """Evaluate ``graph`` on NumPy ``X`` (n_samples, n_inputs), float64, or on its ``rows``.

    Parameters
    ----------
    graph : SparseGraph
        The network (its level plan is built on first use).
    X : ndarray of shape (n_samples, n_inputs), float64
        Inputs (already validated by the caller).
    executor : str, default='auto'
        Accepted for the CUDA engine's signature.
    w, b : ndarray, optional
        Plan-order weights and biases (training passes its own); default the graph's.
    keep_values : bool, default=False
        Also return the node values ``V`` (n_slots, n_samples) for the backward pass; the
        levels then run as the training blocks of :func:`_layout` (dense blocks through
        BLAS). Without it, one sparse product per level, whose per-sample results do not
        depend on the batch.
    check_finite : bool, default=False
        Raise ValueError when ``X`` holds NaN or infinity.
    rows : 1-D integer array, optional
        Evaluate ``X[rows]`` (a minibatch of the training data), which is then never made:
        the rows are gathered straight into the node values.

    Returns
    -------
    out : ndarray of shape (n_samples, n_outputs)
        Output node values; ``(out, V)`` when ``keep_values``.
    """
    if rows is not None:
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        if rows.ndim != 1 or (rows.size and (int(rows.min()) < 0 or int(rows.max()) >= X.shape[0])):
            raise IndexError(f"rows must be a 1-D array of row indices of X (0 to {X.shape[0] - 1}).")
    if check_finite and not np.all(np.isfinite(X if rows is None else X[rows])):
        raise ValueError("X contains NaN or infinite values.")
    plan = graph.plan
    if w is None or b is None:
        pw, pb = graph.plan_params()
        w = pw if w is None else w
        b = pb if b is None else b
    n_in = plan["n_in"]
    n_slots = n_in + plan["nodes"].size
    B = X.shape[0] if rows is None else rows.size
    check_memory(8 * n_slots * B, "cpu", "SparseGraph forward (node values)", floor=SMALL_WORK_BYTES)
    V = np.empty((n_slots, B), dtype=np.float64)
    _put_inputs(V, X, rows)
    if keep_values:
        _forward_blocks(graph, V, w, b)
        return V[plan["out_slots"]].T.copy(), V
    resp, act = plan["resp"], plan["act"]
    for level in range(plan["level_ptr"].shape[0] - 1):
        r0, r1, A = _level_matrix(plan, w, level, n_slots)
        z = b[r0:r1, None] + resp[r0:r1, None] * (A @ V)
        V[n_in + r0 : n_in + r1] = apply_activation(act[r0:r1], z, graph.slope)
    return V[plan["out_slots"]].T.copy()


def _put_inputs(V, X, rows):
    """``V[:n_inputs] = X[rows].T`` (``X.T`` without ``rows``): one pass of the C kernel
    ``gather_t`` where it is compiled, else NumPy's gather and transposed copy."""
    lib = cpu_library("sparsenet")
    if lib is not None and X.dtype == np.float64 and X.flags.c_contiguous:
        B, n_in = V.shape[1], X.shape[1]
        lib.gather_t(
            B, n_in, X.ctypes.data, n_in, None if rows is None else rows.ctypes.data, V.ctypes.data, B
        )
    else:
        V[: X.shape[1]] = (X if rows is None else X[rows]).T


# --------------------------------------------------------------------------- training blocks
def _dense_up_to(rect, n_edges, costs, kind):
    """Largest batch for which a dense product over ``rect`` entries costs no more than the
    sparse method ``kind`` ('csr' or 'gather' of ``costs``: ns per edge and sample, and per
    call): inf, or >= 0."""
    extra = rect * DENSE_NS - n_edges * costs[kind]
    if extra <= 0:  # (ns per sample that the dense product spends more)
        return np.inf
    return max(0.0, (costs[kind + "_call"] - DENSE_CALL_NS) / extra)


class _Block:
    """Rows ``a:b`` of a level (plan edges ``ea:eb``), reading slots ``c0:c1``.

    ``pos``: each edge's position in the row-major ``(b - a, c1 - c0)`` rectangle (None when
    the edges are the whole rectangle in order: ``full``, or when the block is never dense).
    ``costs`` (an entry of :data:`COSTS`: the C kernels' or NumPy's) sets the two thresholds.
    ``cut``: the first column that is a computed node (columns before it are inputs, whose
    gradient is not needed). ``dense_up_to`` / ``gradient_dense_up_to``: the largest batch for
    which the forward and back-propagated products / the weight gradient are dense (inf:
    always). Made on the first call that needs them (a block that the batch at hand keeps
    dense never holds them): the CSR structure (local columns; :meth:`sparse`, which returns
    its addresses for the C kernels, whose three products all read it); for the SciPy
    products, that structure transposed over the computed columns (:meth:`transposed`) and
    edge rows and slots for NumPy's per-edge weight gradient (:meth:`edges`).
    """

    __slots__ = (
        "a",
        "b",
        "ea",
        "eb",
        "c0",
        "c1",
        "cut",
        "full",
        "pos",
        "dense_up_to",
        "gradient_dense_up_to",
        "indptr",
        "indices",
        "t_perm",
        "t_indices",
        "t_indptr",
        "rows",
        "cols",
        "_csr",
        "_csr_t",
        "addr",
        "plan",
    )

    def __init__(self, plan, a, b, costs):
        n_in = plan["n_in"]
        self.a, self.b = a, b
        self.ea, self.eb = ea, eb = int(plan["indptr"][a]), int(plan["indptr"][b])
        cols = plan["indices"][ea:eb].astype(np.intp)
        rows = plan["row_of_edge"][ea:eb].astype(np.intp) - a
        n_rows, n_edges = b - a, eb - ea
        self.c0, self.c1 = c0, c1 = int(cols.min()), int(cols.max()) + 1
        span = c1 - c0
        self.cut = min(max(n_in - c0, 0), span)
        pos = rows * span + (cols - c0)
        rect = n_rows * span
        self.full = n_edges == rect and bool(np.all(pos == np.arange(n_edges)))
        if self.full:
            self.dense_up_to = self.gradient_dense_up_to = np.inf
        else:
            self.dense_up_to = _dense_up_to(rect, n_edges, costs, "csr")
            self.gradient_dense_up_to = _dense_up_to(rect, n_edges, costs, "gather")
        sometimes = max(self.dense_up_to, self.gradient_dense_up_to) >= 1
        if sometimes and not self.full:  # 4 bytes an edge where the rectangle allows
            self.pos = pos.astype(np.int32) if rect < 2**31 else pos
        else:
            self.pos = None
        self.plan = plan  # the graph's own plan, read by the structures made on first use
        self.indptr = self.indices = self.t_perm = self.t_indices = self.t_indptr = None
        self.rows = self.cols = self.addr = None
        self._csr = self._csr_t = None

    def sparse(self):
        """Addresses of the CSR structure (made on the first call) for the C kernels."""
        if self.addr is None:
            plan, a, ea, eb = self.plan, self.a, self.ea, self.eb
            self.indptr = (plan["indptr"][a : self.b + 1] - ea).astype(np.int32)
            self.indices = (plan["indices"][ea:eb] - self.c0).astype(np.int32)
            self.addr = (self.indptr.ctypes.data, self.indices.ctypes.data)
        return self.addr

    def kernel(self, fn, *args):
        """Call the C kernel ``fn`` on this block's rows and CSR structure, then ``args``."""
        fn(self.b - self.a, *self.sparse(), *args)

    def transposed(self):
        """The CSR structure transposed over the computed columns (SciPy's product of the
        gradient passed back), made on the first call."""
        if self.t_perm is None:
            plan, ea, eb, cut = self.plan, self.ea, self.eb, self.cut
            local = plan["indices"][ea:eb].astype(np.intp) - self.c0
            rows = plan["row_of_edge"][ea:eb].astype(np.intp) - self.a
            hidden = np.flatnonzero(local >= cut)  # edges from computed nodes, by source slot
            self.t_perm = hidden[np.argsort(local[hidden], kind="stable")].astype(np.int32)
            self.t_indices = rows[self.t_perm].astype(np.int32)
            counts = np.bincount(local[self.t_perm] - cut, minlength=self.c1 - self.c0 - cut)
            self.t_indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)

    def edges(self):
        """Each edge's row of the block and slot (NumPy's per-edge weight gradient)."""
        if self.rows is None:
            plan = self.plan
            self.cols = plan["indices"][self.ea : self.eb].astype(np.intp)
            self.rows = plan["row_of_edge"][self.ea : self.eb].astype(np.intp) - self.a
        return self.rows, self.cols

    def matrix(self, w):
        """The block's weights as a dense ``(rows, slots)`` matrix (a view when ``full``)."""
        shape = (self.b - self.a, self.c1 - self.c0)
        if self.full:
            return w[self.ea : self.eb].reshape(shape)
        W = np.zeros(shape[0] * shape[1])
        W[self.pos] = w[self.ea : self.eb]
        return W.reshape(shape)

    # The two CSR matrices are built once (SciPy checks a new matrix's structure, which costs
    # more than a small product) and given each call's weights; ``product`` takes them back
    # after the product, so a block holds no weights between calls.
    def csr(self, w):
        if self._csr is None:
            self.sparse()
            shape = (self.b - self.a, self.c1 - self.c0)
            self._csr = sp.csr_matrix((np.zeros(self.eb - self.ea), self.indices, self.indptr), shape)
        self._csr.data = w[self.ea : self.eb]
        return self._csr

    def csr_t(self, w):
        """The transposed CSR over the computed columns: ``(slots - cut, rows)``."""
        if self._csr_t is None:
            self.transposed()
            shape = (self.c1 - self.c0 - self.cut, self.b - self.a)
            self._csr_t = sp.csr_matrix((np.zeros(self.t_perm.size), self.t_indices, self.t_indptr), shape)
        self._csr_t.data = w[self.ea : self.eb][self.t_perm]
        return self._csr_t

    @staticmethod
    def product(A, M):
        """``A @ M`` for a matrix of :meth:`csr` or :meth:`csr_t`, whose weights are then let go."""
        out = A @ M
        A.data = _NO_WEIGHTS
        return out


#: what a block's CSR matrices hold between calls
_NO_WEIGHTS = np.zeros(0)


def _layout(graph, again=False):
    """Training blocks per level, built once per plan and kernel choice, kept with the graph
    (not pickled). ``again``: the layout the forward pass of this step just used, without
    asking for the kernels anew (the backward pass; a new plan still rebuilds it).

    Returns a list of ``(r0, r1, blocks, code, unit_response, covered)`` per level: its plan
    rows, its :class:`_Block` list (empty for a level without edges), its one activation code
    (None when the level mixes codes), whether every response of the level is 1 and whether
    the blocks' products write every row of the level (else its sums start from zero).
    """
    plan = graph.plan
    cached = graph.__dict__.get("_cpu_layout")
    if again and cached is not None and cached[0] is plan:
        return cached[1]
    lib = cpu_library("sparsenet")
    if cached is not None and cached[0] is plan and cached[3] is lib:
        return cached[1]
    costs = COSTS["numpy" if lib is None else "c"]
    lp, indptr, indices = plan["level_ptr"], plan["indptr"], plan["indices"]
    act, resp = plan["act"], plan["resp"]
    levels = []
    for level in range(lp.shape[0] - 1):
        r0, r1 = int(lp[level]), int(lp[level + 1])
        e0, e1 = int(indptr[r0]), int(indptr[r1])
        blocks, covered = [], True
        if e1 > e0:
            cols = indices[e0:e1]
            span = int(cols.max()) - int(cols.min()) + 1
            step = r1 - r0
            rect = (r1 - r0) * span
            dense_some = _dense_up_to(rect, e1 - e0, costs, "gather") >= 1
            if 8 * rect > BLOCK_BYTES and dense_some:
                step = max(1, BLOCK_BYTES // (8 * span))  # dense for some batch: cut by rows
            blocks = [_Block(plan, a, min(a + step, r1), costs) for a in range(r0, r1, step)]
            covered = all(blk.eb > blk.ea for blk in blocks)  # a cut without edges has no product
            blocks = [blk for blk in blocks if blk.eb > blk.ea]
        codes = act[r0:r1]
        code = int(codes[0]) if codes.size and bool(np.all(codes == codes[0])) else None
        levels.append((r0, r1, blocks, code, bool(np.all(resp[r0:r1] == 1.0)), covered and bool(blocks)))
    # the output nodes' rows of the gradient: set, not added, when each is a distinct computed node
    rows = plan["out_slots"].astype(np.intp) - plan["n_in"]
    distinct = rows.size == np.unique(rows).size and (rows.size == 0 or int(rows.min()) >= 0)
    graph._cpu_layout = (plan, levels, rows if distinct else None, lib)
    return levels


def _activate_in_place(code, z, codes, slope):
    """The activation of a level's sums ``z`` (rows of ``V``), written over them.

    Identity and ReLU (the hidden layers of a trained MLP) take no temporary; ReLU as
    ``max(z, 0)``, the same values as the evaluation's ``where(z > 0, z, 0)`` (a NaN sum, which
    only a diverged fit makes, stays NaN, and the fit stops on its loss)."""
    if code == ACTIVATIONS["identity"]:
        return
    if code == ACTIVATIONS["relu"]:
        np.maximum(z, 0.0, out=z)
    elif code is None:
        z[...] = apply_activation(codes, z, slope)
    else:
        z[...] = activation(code, z, slope)


def _c_ready(w, *arrays):
    """``w`` as the C kernels read it (contiguous float64), after checking that the node-value
    matrices they write into are too (they are made here, so this only guards the code)."""
    for a in arrays:
        if a.dtype != np.float64 or not a.flags.c_contiguous:
            raise AssertionError("the C kernels need contiguous float64 node values")
    return np.ascontiguousarray(w, dtype=np.float64)


def _forward_blocks(graph, V, w, b):
    """Fill the computed rows of ``V`` (inputs already in place) level by level; each level's
    sums are made in its rows of ``V`` (a level reads only earlier slots) and activated there."""
    plan = graph.plan
    n_in, resp, act = plan["n_in"], plan["resp"], plan["act"]
    levels = _layout(graph)
    lib = graph._cpu_layout[3]
    B = V.shape[1]
    if lib is not None:
        w = _c_ready(w, V)
        v_addr, w_addr, row = V.ctypes.data, w.ctypes.data, 8 * B
    for r0, r1, blocks, code, unit, covered in levels:
        z = V[n_in + r0 : n_in + r1]
        if not covered:
            z.fill(0.0)
        for blk in blocks:
            Vs, out = V[blk.c0 : blk.c1], z[blk.a - r0 : blk.b - r0]
            if B <= blk.dense_up_to:
                np.matmul(blk.matrix(w), Vs, out=out)
            elif lib is not None:  # V[n_in + a : n_in + b] = W @ V[c0:c1]
                w_blk, v_out = w_addr + 8 * blk.ea, v_addr + row * (n_in + blk.a)
                blk.kernel(lib.spmm, w_blk, v_addr + row * blk.c0, B, v_out, B, B, 0)
            else:
                out[...] = blk.product(blk.csr(w), Vs)
        if not unit:
            z *= resp[r0:r1, None]
        z += b[r0:r1, None]
        _activate_in_place(code, z, act[r0:r1], graph.slope)


def backward(graph, V, G_out, w, executor="auto"):
    """Plan-order gradients ``(gw, gb)`` of a loss, given dL/d(outputs) ``G_out`` (n_outputs, B).

    Levels are walked in reverse over the training blocks of :func:`_layout`; each block adds
    its nodes' gradient, through its weights, to the hidden nodes it reads (which lie in
    earlier levels), so a level's gradient is complete when its turn comes.

    Parameters
    ----------
    graph : SparseGraph
        The network.
    V : ndarray of shape (n_slots, B)
        Node values of the forward pass (``forward(..., keep_values=True)``).
    G_out : ndarray of shape (n_outputs, B)
        Gradient of the loss with respect to the outputs.
    w : ndarray
        Plan-order weights used in the forward pass.
    executor : str, default='auto'
        Accepted for the CUDA engine's signature.

    Returns
    -------
    gw : ndarray of shape (n_active_edges,)
        Gradient with respect to the plan-order weights.
    gb : ndarray of shape (n_computed_nodes,)
        Gradient with respect to the biases of the computed nodes.
    """
    plan = graph.plan
    n_in = plan["n_in"]
    n_comp = plan["nodes"].size
    B = V.shape[1]
    levels = _layout(graph, again=True)
    out_rows, lib = graph._cpu_layout[2], graph._cpu_layout[3]
    G = np.zeros((n_comp, B))  # dL/d(node value), complete for a level once later levels ran
    if out_rows is not None:
        G[out_rows] = G_out
    else:
        np.add.at(G, plan["out_slots"] - n_in, G_out)
    gw = np.empty(plan["indices"].shape[0])
    gb = np.empty(n_comp)
    resp, act = plan["resp"], plan["act"]
    step = max(1, GATHER_BYTES // (16 * max(B, 1)))
    if lib is not None:
        w = _c_ready(w, V, G)
        v_addr, g_addr, row = V.ctypes.data, G.ctypes.data, 8 * B
        gw_addr, w_addr = gw.ctypes.data, w.ctypes.data
    for r0, r1, blocks, code, unit, _ in reversed(levels):
        f = V[n_in + r0 : n_in + r1]
        # the level's rows of G are complete and read no more: D (dL/d(sum)) is made over them
        D = G[r0:r1]
        if code == ACTIVATIONS["relu"]:
            D *= f > 0.0  # the derivative (f > 0) as 0/1, without a float copy
        elif code is None:
            D *= activation_derivative(act[r0:r1], f, graph.slope)
        elif code != ACTIVATIONS["identity"]:  # the identity's derivative is 1
            D *= derivative(code, f, graph.slope)
        gb[r0:r1] = D.sum(axis=1)
        if not unit:
            D *= resp[r0:r1, None]  # dL/d(weighted sum)
        for blk in blocks:
            Db, Vs = D[blk.a - r0 : blk.b - r0], V[blk.c0 : blk.c1]
            if blk.full:  # the gradient's entries are the edges', in plan order
                np.matmul(Db, Vs.T, out=gw[blk.ea : blk.eb].reshape(Db.shape[0], -1))
            elif B <= blk.gradient_dense_up_to:
                np.take((Db @ Vs.T).ravel(), blk.pos, out=gw[blk.ea : blk.eb])
            elif lib is not None:  # gw at the edges of D[a:b] @ V[c0:c1].T
                d_blk, gw_blk = g_addr + row * blk.a, gw_addr + 8 * blk.ea
                blk.kernel(lib.sddmm, d_blk, B, v_addr + row * blk.c0, B, B, gw_blk)
            else:
                rows, cols = blk.edges()
                for k0 in range(0, blk.eb - blk.ea, step):
                    k1 = min(blk.eb - blk.ea, k0 + step)
                    gw[blk.ea + k0 : blk.ea + k1] = np.einsum("ij,ij->i", Db[rows[k0:k1]], V[cols[k0:k1]])
            if blk.cut < blk.c1 - blk.c0:  # the block reads hidden nodes: pass their gradient on
                target = G[blk.c0 + blk.cut - n_in : blk.c1 - n_in]
                if B <= blk.dense_up_to:
                    target += blk.matrix(w)[:, blk.cut :].T @ Db
                elif lib is not None:  # target += W[:, cut:].T @ D[a:b]
                    w_blk, d_blk = w_addr + 8 * blk.ea, g_addr + row * blk.a
                    g_out = g_addr + row * (blk.c0 + blk.cut - n_in)
                    blk.kernel(lib.spmm_t, w_blk, d_blk, B, g_out, B, B, blk.cut)
                else:
                    target += blk.product(blk.csr_t(w), Db)
    return gw, gb
