"""
GBNN associative memory: retrieval rate versus erased symbols
==============================================================

A :class:`~sknn_gpu.memory.GBNNMemory` stores messages of ``C`` symbols as cliques
of a ``C``-partite binary network and completes messages whose symbols were partly
erased. This example reproduces, at a size that runs in seconds on a CPU, the
paper's comparison of the two classic retrieval rules (its Scenario 1: ``C = 8``
clusters of ``L = 128`` neurons, 5,000 stored messages): sum-of-sum degrades much
faster than sum-of-max as more symbols are erased, and the joint scheme returns
exactly what sum-of-max returns, in fewer iterations.

It also compares the measured edge density and the measured one-step error rate
with the closed forms :func:`~sknn_gpu.memory.theoretical_density` and
:func:`~sknn_gpu.memory.erasure_error_rate`.
"""

# %%
# Store random messages
# ---------------------

# sphinx_gallery_start_ignore
# as a script: figures saved to one folder, a missing package named (examples/_helpers.py)
try:
    from _helpers import require, save_figures
except ImportError:  # this file alone, e.g. downloaded from the gallery: figures not saved
    require = save_figures = lambda *modules: False
require("matplotlib")
# sphinx_gallery_end_ignore
import os

import matplotlib.pyplot as plt
import numpy as np

from sknn_gpu.memory import GBNNMemory, erasure_error_rate, theoretical_density

# SKNN_GPU_EXAMPLES_SMALL=1 asks for a quick run: fewer messages and probes
SMALL = os.environ.get("SKNN_GPU_EXAMPLES_SMALL", "") not in ("", "0")

C, L, M, K = 8, 128, 5000, 1000
if SMALL:
    M, K = 1500, 200
rng = np.random.default_rng(0)
messages = rng.integers(0, L, size=(M, C))
truth = messages[rng.choice(M, K, replace=False)]

memories = {
    rule: GBNNMemory(rule=rule, gamma=1.0, max_iter=20, random_state=0, device="cpu").fit(messages)
    for rule in ("sum-of-sum", "sum-of-max", "joint")
}
density = memories["joint"].density_
print(f"measured density {density:.4f}, theory {theoretical_density(M, L):.4f}")


# %%
# Erase symbols and retrieve
# --------------------------
# ``-1`` marks an erased symbol. ``retrieve`` also reports, per probe, how many
# neurons were left active in each cluster, whether the rule converged and the
# iterations it used.
def erase(msgs, e):
    probes = msgs.copy()
    cols = np.argsort(rng.random(probes.shape), axis=1)[:, :e]
    np.put_along_axis(probes, cols, -1, axis=1)
    return probes


erasures = np.arange(1, C)
rates = {rule: [] for rule in memories}
iters = {rule: [] for rule in memories}
for e in erasures:
    probes = erase(truth, e)
    for rule, mem in memories.items():
        res = mem.retrieve(probes)
        rates[rule].append(np.mean((res.messages == truth).all(axis=1)))
        iters[rule].append(res.n_iter.mean())
    same = np.array_equal(memories["joint"].predict(probes), memories["sum-of-max"].predict(probes))
    print(f"e={e}: joint == sum-of-max on every probe: {same}")

# %%
# Retrieval rate versus erasures
# ------------------------------
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
for rule, marker in (("sum-of-sum", "o"), ("sum-of-max", "s"), ("joint", "x")):
    ax1.plot(erasures, rates[rule], marker=marker, label=rule)
    ax2.plot(erasures, iters[rule], marker=marker, label=rule)
ax1.set_xlabel("erased symbols (of 8)")
ax1.set_ylabel("retrieval rate")
ax1.set_title(f"C={C}, L={L}, {M:,} stored, {K:,} probes")
ax1.legend()
ax2.set_xlabel("erased symbols (of 8)")
ax2.set_ylabel("mean iterations")
ax2.set_title("iterations (joint's first step counts as one)")
fig.tight_layout()

# %%
# Theory versus measurement
# -------------------------
# ``erasure_error_rate`` is the probability that one step from the known symbols
# leaves some erased cluster with a wrong candidate. The joint rule with
# ``max_iter=1`` stops after exactly that step, so its ``n_candidates`` measure it.
one_step = GBNNMemory(rule="joint", max_iter=1, device="cpu").fit(messages)
print(" e   P_e theory   measured")
for e in erasures:
    amb = one_step.retrieve(erase(truth, e))
    measured = np.mean((amb.n_candidates > 1).any(axis=1))
    print(f"{e:2d}   {erasure_error_rate(density, C, e, L):10.4f}   {measured:8.4f}")

# sphinx_gallery_start_ignore
save_figures()
# sphinx_gallery_end_ignore
plt.show()
