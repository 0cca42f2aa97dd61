import pytest

from jouleprof.bench.warmup import WarmupRule


def test_settles_once_step_times_are_stable():
    rule = WarmupRule(min_steps=2, window=3, tolerance=0.05)
    times = [5.0, 1.3, 1.1, 1.0, 1.01, 0.99, 1.0, 1.0]
    settled_at = next(n for n in range(1, len(times) + 1) if rule.settled(times[:n]))
    # At 7 steps the last three agree but the three before them (median 1.1) do not; at 8 both.
    assert settled_at == 8
    assert not rule.settled([1.0])  # never before min_steps / two windows


def test_gives_up_after_max_steps():
    rule = WarmupRule(max_steps=10)
    noisy = [1.0, 2.0] * 5
    assert rule.settled(noisy)
    assert not rule.settled(noisy[:9])


@pytest.mark.parametrize(
    "kw", [{"min_steps": 0}, {"window": 1}, {"tolerance": 0}, {"max_steps": 1}]
)
def test_bad_rule_is_refused(kw):
    with pytest.raises(ValueError):
        WarmupRule(**kw)
