"""Divisors of a batch size, and the largest one that fits a memory budget, in bounded steps.

A micro batch must divide a worker's share of the global batch (pretraining) or every swept batch
size (fine-tuning). A spec may give a batch of 2^40 or 10^12, so the divisors are never found by
trying every number up to the batch: the batch (at most 2^63, an int field's range) is factored
by Miller-Rabin (deterministic below 3.3e24 with the first 12 primes as bases) and Pollard's rho
(Brent's variant), and its divisors listed from the factors: at most 103,680 of them below 2^63
(897,612,484,786,617,600 has that many), a few thousand for any batch a study uses. The memory
estimates grow with the micro batch, so the largest divisor that fits is a bisection over them.
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable

SMALL_PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
"""Trial divisors, and the Miller-Rabin bases that decide primality of every n < 3.3e24."""


def is_prime(n: int) -> bool:
    if n < 2:
        return False
    for p in SMALL_PRIMES:
        if n % p == 0:
            return n == p
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in SMALL_PRIMES:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def some_factor(n: int, rng: random.Random) -> int:
    """A non-trivial factor of the odd composite `n` (Brent's cycle finding on x^2 + c mod n,
    gcds taken over batches of 128 steps)."""
    while True:
        y, c, batch = rng.randrange(1, n), rng.randrange(1, n), 128
        g = r = q = 1
        while g == 1:
            x = y
            for _ in range(r):
                y = (y * y + c) % n
            k = 0
            while k < r and g == 1:
                saved = y
                for _ in range(min(batch, r - k)):
                    y = (y * y + c) % n
                    q = q * abs(x - y) % n
                g = math.gcd(q, n)
                k += batch
            r *= 2
        if g == n:  # the batch overshot: step once at a time from its start
            g = 1
            while g == 1:
                saved = (saved * saved + c) % n
                g = math.gcd(abs(x - saved), n)
        if g != n:
            return g


def prime_factors(n: int) -> dict[int, int]:
    """prime -> exponent of the positive integer `n`."""
    factors: dict[int, int] = {}
    for p in SMALL_PRIMES:
        while n % p == 0:
            factors[p] = factors.get(p, 0) + 1
            n //= p
    rng, pending = random.Random(0), [n] if n > 1 else []
    while pending:
        m = pending.pop()
        if is_prime(m):
            factors[m] = factors.get(m, 0) + 1
        else:
            f = some_factor(m, rng)
            pending += [f, m // f]
    return factors


def divisors(n: int) -> list[int]:
    """Every divisor of the positive integer `n`, ascending."""
    found = [1]
    for p, exponent in prime_factors(n).items():
        found = [d * p ** e for d in found for e in range(exponent + 1)]
    return sorted(found)


def largest_fitting(choices: list[int], fits: Callable[[int], bool]) -> int | None:
    """The largest of the ascending `choices` that `fits` (a test true up to some value and false
    above it, as a memory estimate against a budget is), by bisection; None when none fits."""
    low, high = 0, len(choices)  # choices[:low] fit, choices[high:] do not
    while low < high:
        middle = (low + high) // 2
        if fits(choices[middle]):
            low = middle + 1
        else:
            high = middle
    return choices[low - 1] if low else None
