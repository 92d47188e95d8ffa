"""pass@k: the unbiased estimator of Chen et al. (2021), "Evaluating Large Language Models
Trained on Code":  pass@k = 1 - C(n - c, k) / C(n, k)  for n samples of which c are correct.

Computed as a product, 1 - prod_{i = n-c+1}^{n} (1 - k / i), which never forms the huge
binomials (stable for any n).
"""

from __future__ import annotations


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn (without replacement) from n is correct."""
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n (got n={n}, c={c}, k={k})")
    if n - c < k:  # every draw of k must include a correct sample
        return 1.0
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong
