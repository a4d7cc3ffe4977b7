"""MMLU-Pro: reading the release's formats and layouts, the benchmark's three answer-extraction rules by
hand, the oracle at 100%, perturbed answers scored as the rules say, bad input named by field."""

from __future__ import annotations

import json
import random

import ml_collections
import pytest

from rcgrpo_jax.config_fields import ConfigError
from rcgrpo_jax.eval import mmlu_pro as mp
from rcgrpo_jax.eval import mmlu_pro_run
from tests.helpers import mmlu_pro_fixture as fx


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_release_folder_reads_both_splits(tmp_path, fmt):
    splits = mp.load(fx.write_release(str(tmp_path), fmt))
    assert [q.id for q in splits.test] == ["100", "101", "102", "103", "104", "105"]
    assert len(splits.validation) == 3
    q = splits.test[0]
    assert q.options == ("5", "6", "7", "8") and q.answer == "C" and q.answer_index == 2  # "N/A" padding dropped
    assert len(splits.test[1].options) == 10  # a full ten-option question keeps all ten
    assert splits.validation[0].cot_content.startswith("A: Let's think")


def test_single_file_and_json_list(tmp_path):
    path = tmp_path / "mmlu_pro_test.json"
    path.write_text(json.dumps(fx.test_records()))
    splits = mp.load(str(path))
    assert len(splits.test) == 6 and splits.validation == ()


def test_prompt_has_the_benchmark_parts():
    q = mp.Question("1", "math", "What is 3 + 4?", ("5", "6", "7"), "C", 2)
    shot = mp.Question(
        "9", "math", "What is 1 + 1?", ("1", "2"), "B", 1, "A: Let's think step by step. The answer is (B)."
    )
    text = mp.prompt_text(q, [shot])
    assert text.startswith("The following are multiple choice questions (with answers) about math.")
    assert 'finish your answer with "the answer is (X)"' in text
    assert (
        "Question: What is 1 + 1?\nOptions:\nA. 1\nB. 2\nAnswer: Let's think step by step. The answer is (B).\n\n"
        in text
    )
    assert text.endswith("Question: What is 3 + 4?\nOptions:\nA. 5\nB. 6\nC. 7\nAnswer: Let's think step by step.")
    assert mp.shots_for(q, [shot, shot], 1) == [shot]


@pytest.mark.parametrize(
    "text, want",
    [
        ("so the answer is (B).", ("B", "answer_is")),
        ("the answer is C", ("C", "answer_is")),
        ("the answer is (B) ... wait, the answer is (D)", ("B", "answer_is")),  # the first one
        ("Answer: D\nand Answer: E", ("D", "answer_colon")),  # first line that has one
        ("answer: A then answer: G", ("G", "answer_colon")),  # the last on that line
        ("I pick E. Or maybe F", ("F", "last_letter")),  # the last stand-alone letter
        ("The answer is (A)\nQuestion: next one, the answer is (B)", ("A", "answer_is")),
        ("Thinking...\nQuestion: the answer is (B)", (None, None)),  # cut at the stop string
        ("no letters here", (None, None)),
        ("I cannot tell.", ("I", "last_letter")),  # the rule's quirk: the pronoun is a stand-alone letter
        ("the answer is (K)", (None, None)),  # K is no option letter, and no stand-alone A-J follows
    ],
)
def test_extraction_rules_by_hand(text, want):
    assert mp.extract_answer(text) == want


def _questions(tmp_path):
    return list(mp.load(fx.write_release(str(tmp_path), "jsonl")).test)


def test_oracle_scores_100(tmp_path):
    qs = _questions(tmp_path)
    recs = mp.score_all(qs, {q.id: mp.oracle_output(q) for q in qs})
    s = mp.summarize(recs)
    assert s["overall"] == 1.0 and s["overall_strict"] == 1.0 and s["unscored"] == {}
    assert s["categories"] == {"biology": 1.0, "law": 1.0, "math": 1.0} and s["n"] == {
        "biology": 2,
        "law": 1,
        "math": 3,
    }


def test_perturbed_answers_score_as_the_rules_say(tmp_path):
    qs = _questions(tmp_path)
    wrong = {q.id: f"The answer is ({mp.LETTERS[(q.answer_index + 1) % len(q.options)]})." for q in qs}
    wrong[qs[0].id] = "Answer: C"  # right, by the second rule
    wrong[qs[1].id] = "not sure."  # nothing extracted: the benchmark's seeded guess
    recs = mp.score_all(qs, wrong)
    guess_rng = random.Random(mp.GUESS_SEED)
    guess = mp.LETTERS[guess_rng.randint(0, len(qs[1].options) - 1)]
    assert recs[0]["official_pass"] and recs[0]["extracted_by"] == "answer_colon"
    assert recs[1]["error_kind"] == mp.NO_ANSWER and recs[1]["guess"] == guess
    assert recs[1]["official_pass"] == (guess == qs[1].answer) and not recs[1]["strict_pass"]
    assert all(not r["official_pass"] and r["error_kind"] == mp.WRONG_ANSWER for r in recs[2:])
    s = mp.summarize(recs)
    assert s["overall_strict"] == 1 / 6 and s["unscored"] == {"no_answer": 1}
    assert s["unscored_ids"] == {"no_answer": [qs[1].id]}


def test_failures_are_counted_and_named(tmp_path):
    qs = _questions(tmp_path)
    recs = mp.score_all(qs, {}, {qs[0].id: mp.failed(qs[0], mp.TRUNCATED, "too long")})
    s = mp.summarize(recs)
    assert s["questions"] == 6 and s["unscored"] == {"missing_output": 5, "truncated": 1}
    assert s["unscored_ids"]["truncated"] == [qs[0].id]


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("options", "A, B", "field 'options': expected a list of strings"),
        ("options", ["N/A"] * 10, "field 'options': expected 1 to 10 options"),
        ("options", [str(i) for i in range(11)], "field 'options': expected 1 to 10 options"),
        ("answer_index", 7, "field 'answer_index': expected an integer in [0, 4)"),
        ("answer", "D", "field 'answer': expected the letter of answer_index 2, 'C'"),
        ("question_id", "x1", "field 'question_id': expected an integer"),
        ("category", "", "field 'category': expected a non-empty string"),
        (None, None, "field 'src': expected the field (it is missing)"),
    ],
)
def test_malformed_record_names_the_field(tmp_path, field, value, expected):
    rows = fx.test_records()
    if field is None:
        del rows[0]["src"]
    else:
        rows[0][field] = value
    path = fx.write_jsonl(str(tmp_path / "test.jsonl"), rows)
    with pytest.raises(mp.MmluProDataError) as err:
        mp.load(path)
    assert "record 0" in str(err.value) and expected in str(err.value)


def _eval_cfg(path: str, shots: int = 0):
    return ml_collections.ConfigDict({"max_tasks": -1, "mmlu_pro": {"path": path, "shots": shots, "max_new_tokens": 8}})


def test_bad_paths_and_layouts_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"config\.eval\.mmlu_pro\.path: the mmlu_pro suite needs"):
        mmlu_pro_run.load_checked(_eval_cfg(""))
    with pytest.raises(ConfigError, match=r"config\.eval\.mmlu_pro\.path: no such file or folder"):
        mmlu_pro_run.load_checked(_eval_cfg(str(tmp_path / "absent")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"config\.eval\.mmlu_pro\.path: .* no test split"):
        mmlu_pro_run.load_checked(_eval_cfg(str(tmp_path / "empty")))
    only_test = fx.write_jsonl(str(tmp_path / "test.jsonl"), fx.test_records())
    with pytest.raises(ConfigError, match=r"config\.eval\.mmlu_pro\.shots: 5 worked examples need the validation"):
        mmlu_pro_run.load_checked(_eval_cfg(only_test, shots=5))
    assert len(mmlu_pro_run.load_checked(_eval_cfg(only_test)).test) == 6


def test_max_tasks_keeps_the_first_per_subject(tmp_path):
    splits = mp.load(fx.write_release(str(tmp_path), "jsonl"))
    kept = mmlu_pro_run.questions_of(splits, 1)
    assert [(q.category, q.id) for q in kept] == [("math", "100"), ("biology", "103"), ("law", "105")]
