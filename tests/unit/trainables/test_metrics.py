"""Metrics against hand-computed values (Python floats, the same formulas: approx's default tolerance)."""
import math

import numpy as np
import pytest

from trainables.tasks.metrics import accuracy, entity_f1, ndcg_at_k, normalize_answer, squad_scores


def test_accuracy():
    assert accuracy(np.array([1, 0, 2, 2]), np.array([1, 1, 2, 0])) == 50.0


def test_entity_f1_on_a_hand_made_example():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    # PER right; LOC labelled ORG (wrong type); ORG's span too long (I-ORG continues it).
    predicted = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "I-ORG"]]
    # 1 of 3 predicted entities is correct, 1 of 3 gold entities is found: P = R = F1 = 1/3.
    assert entity_f1(predicted, gold) == pytest.approx(100 / 3)
    assert entity_f1(gold, gold) == 100.0


def test_squad_normalisation_and_f1_em():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_answer("an apple, a pear") == "apple pear"
    scores = squad_scores(["the Denver Broncos", "Broncos of Denver"], [["Denver Broncos"], ["Denver Broncos"]])
    # Q1: normalised equal -> EM 1, F1 1. Q2: tokens {broncos, of, denver} vs {denver, broncos}:
    # overlap 2, P = 2/3, R = 1 -> F1 = 0.8, EM 0.
    assert scores["exact_match"] == pytest.approx(50.0)
    assert scores["f1"] == pytest.approx(90.0)


def test_squad_takes_the_max_over_gold_answers():
    scores = squad_scores(["in 1990"], [["1990", "in the year 1990"]])
    # vs "1990": P = 1/2, R = 1 -> 2/3; vs "in the year 1990" (normalised "in year 1990"):
    # overlap {in, 1990} = 2, P = 1, R = 2/3 -> 0.8. The max is 0.8; EM 0.
    assert scores["f1"] == pytest.approx(80.0) and scores["exact_match"] == 0.0


def test_squad_v2_no_answer():
    scores = squad_scores(["", "something", ""], [[], [], ["Paris"]])
    # Unanswerable: empty prediction scores 1, any text 0. Answerable with empty prediction: 0.
    assert scores["f1"] == pytest.approx(100 / 3) and scores["exact_match"] == pytest.approx(100 / 3)


def test_ndcg_at_10_on_a_hand_computed_ranking():
    ranking = ["d3", "d1", "d7", "d2"]
    relevance = {"d1": 1, "d2": 2}
    dcg = (2 ** 1 - 1) / math.log2(3) + (2 ** 2 - 1) / math.log2(5)
    idcg = (2 ** 2 - 1) / math.log2(2) + (2 ** 1 - 1) / math.log2(3)
    assert ndcg_at_k([ranking], [relevance]) == pytest.approx(100 * dcg / idcg)
    assert ndcg_at_k([["d2", "d1"]], [relevance]) == pytest.approx(100.0)
    # Only the top 10 count: a relevant document at rank 11 adds nothing.
    assert ndcg_at_k([[f"x{i}" for i in range(10)] + ["d1"]], [{"d1": 1}]) == 0.0
