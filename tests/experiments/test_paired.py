import numpy as np
import pytest

from experiments import paired


def test_sign_test_by_hand():
    assert paired.sign_test([0.1, 0.2, 0.3]) == pytest.approx(2 / 8)  # 3 of 3 positive: two-sided 0.25
    assert paired.sign_test([1, 1, 1, 1, 1]) == pytest.approx(2 / 32)
    assert paired.sign_test([1, -1, -1, -1]) == pytest.approx((1 + 4 + 4 + 1) / 16)  # k=1 of 4: |k-2| >= 1
    assert paired.sign_test([0.0, 0.0]) == 1.0
    assert paired.sign_test([0.0, 0.5, -0.5]) == 1.0  # the tie is dropped; 1 of 2


def test_overall_is_the_unweighted_mean_of_category_rates():
    passes = np.array([[1, 0, 0, 1, 1]], np.float64)
    cats = ["a", "a", "a", "b", "b"]  # a: 1/3, b: 1 -> (1/3 + 1) / 2
    assert paired.overall(passes, cats)[0] == pytest.approx(2 / 3)


def test_compare_identical_rows_is_not_significant():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 2, (3, 40)).astype(float)
    cats = ["x"] * 20 + ["y"] * 20
    r = paired.compare(a, a.copy(), cats, draws=200)
    assert r.mean_diff == 0 and r.bootstrap_ci95 == (0.0, 0.0) and not r.significant
    assert r.sign_test_p == 1.0 and r.bootstrap_p_one_sided == 1.0


def test_compare_a_clear_winner_and_the_per_seed_differences():
    cats = ["x"] * 10 + ["y"] * 10
    a = np.ones((3, 20))
    b = np.zeros((3, 20))
    b[0, :10] = 1  # seed 0: b passes all of x -> overall_b = 0.5
    r = paired.compare(a, b, cats, draws=300)
    assert r.per_seed_diff == pytest.approx((0.5, 1.0, 1.0))
    assert r.mean_diff == pytest.approx(2.5 / 3)
    assert r.bootstrap_ci95[0] > 0 and r.significant and r.bootstrap_p_one_sided == 0.0
    assert r.sign_test_p == pytest.approx(0.25)  # three seeds can never reach 5% by the sign test


def test_compare_refuses_unpaired_shapes():
    with pytest.raises(ValueError, match="paired rows"):
        paired.compare(np.zeros((2, 4)), np.zeros((3, 4)), ["x"] * 4)
