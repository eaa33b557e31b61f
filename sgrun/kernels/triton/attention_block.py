"""One block of keys in a paged-KV attention kernel: load its K and V from the pool through the
page table, then fold it into the running online softmax (log2 domain). The decode and the
extend kernels differ in which query rows they hold and which keys each row may see; this step
is the same for both."""

from __future__ import annotations

from sgrun.kernels.triton.launch import dot, tl, triton

if triton is not None:

    @triton.jit
    def attend_block(q, m_i, l_i, acc, k_base, v_base, pt_base, n, n_mask, visible, offs_d, d_mask,
                     stride_kp, stride_kt, stride_vp, stride_vt, qk_scale,
                     PAGE_SIZE: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
        """(m_i, l_i, acc) after the keys at positions `n` (those in `n_mask` exist; `visible`, a
        [rows, BLOCK_N] or [1, BLOCK_N] mask, says which each row sees). A row that has seen no
        visible key yet (a sliding window starting past this block) keeps m = -inf, l = 0 and
        acc = 0: its max is taken as 0 for the exponentials, so exp2 never meets -inf - -inf."""
        page = tl.load(pt_base + n // PAGE_SIZE, mask=n_mask, other=0).to(tl.int64)
        slot = n % PAGE_SIZE
        kv_mask = n_mask[:, None] & d_mask[None, :]
        k = tl.load(k_base + page[:, None] * stride_kp + slot[:, None] * stride_kt + offs_d[None, :],
                    mask=kv_mask, other=0.0)
        v = tl.load(v_base + page[:, None] * stride_vp + slot[:, None] * stride_vt + offs_d[None, :],
                    mask=kv_mask, other=0.0)
        s = dot(q, tl.trans(k), PRECISION, UPCAST) * qk_scale
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + dot(p.to(v.dtype), v, PRECISION, UPCAST)
        return m_new, l_i, acc
