"""Derive the shipped offline data set from WordNet 3.0 (Debian package `wordnet-base`).

Run once by a maintainer, not by users; the outputs are committed under
`trainables/data_files/wordnet/` (about 3 MiB together):

    apt-get download wordnet-base && dpkg -x wordnet-base_*.deb /tmp/wn
    python scripts/derive_wordnet_data.py /tmp/wn/usr/share/wordnet trainables/data_files/wordnet

What it writes (all gzip JSON lines; WordNet 3.0 licence in LICENSE.WordNet beside them):
- `corpus.jsonl.gz`      pretraining documents {"text"}: glosses and example sentences of the
                         synsets *not* held out, grouped by lexicographer file in database order
                         (neighbouring synsets are related, so a document reads as one topic).
- `supersense_cls.jsonl.gz` sequence classification {"sentence", "label", "split"}: the gloss of a
                         held-out noun synset -> its lexicographer category (8 classes). The label
                         is WordNet's own, so it is exact.
- `supersense_tag.jsonl.gz` token classification {"tokens", "ner_tags", "split"} (BIO over the
                         same 8 categories): glosses and examples of held-out synsets, where every
                         word or two-word compound that is *monosemous* in WordNet (one sense over
                         all parts of speech) and whose sense is in a tagged category carries that
                         category. Monosemy makes the tag a fact of the lexicon, not a guess.
- `supersense_qa.jsonl.gz` extractive QA in SQuAD v2's schema {"id", "title", "context", "question",
                         "answers": {"text", "answer_start"}, "split"}: the context is two consecutive
                         tagging sentences, the question "Which word names an animal?" (one of the 8
                         categories), the answers every span tagged with that category. A quarter of
                         the questions ask for a category the context lacks (no answer, as in SQuAD v2).
- `usage_retrieval.jsonl.gz` retrieval in MS MARCO v1.1's schema {"query_id", "query", "query_type",
                         "passages": {"is_selected", "passage_text", "url"}, "answers", "split"}: a
                         usage example -> its synset's entry, among 8 entries of neighbouring synsets.
- `definition_retrieval.jsonl.gz` retrieval in the schema of sentence-transformers/natural-questions
                         {"query", "answer"}, one split: "what does <lemma> mean?" -> the gloss. An
                         evaluation-only set: the model trained on usage_retrieval is scored on it.

Held out = synset offset hash in the last fifth; the pretraining corpus never contains a held-out
synset's gloss, so the tasks measure transfer, not memorisation.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

CATEGORIES = {5: "ANIMAL", 6: "ARTIFACT", 8: "BODY", 13: "FOOD", 15: "LOCATION",
              18: "PERSON", 20: "PLANT", 27: "SUBSTANCE"}
WORD_RE = re.compile(r"[A-Za-z0-9]+(?:[-'][A-Za-z0-9]+)*|[^\sA-Za-z0-9]")


def parse_data_file(path: Path):
    """Yield (offset, lexfile number, pos, lemmas, gloss, examples) per synset line."""
    for line in path.read_text(encoding="latin-1").splitlines():
        if line.startswith("  "):
            continue  # licence header
        head, _, gloss_part = line.partition(" | ")
        fields = head.split()
        offset, lex_filenum, pos, n_words = fields[0], int(fields[1]), fields[2], int(fields[3], 16)
        lemmas = [fields[4 + 2 * i].replace("_", " ") for i in range(n_words)]
        lemmas = [re.sub(r"\([a-z]+\)$", "", lemma) for lemma in lemmas]  # adjective markers
        examples = re.findall(r'"([^"]+)"', gloss_part)
        gloss = re.sub(r';?\s*"[^"]*"', "", gloss_part).strip().rstrip(";").strip()
        yield offset + pos, lex_filenum, pos, lemmas, gloss, examples


def held_out(key: str) -> bool:
    return int(hashlib.sha1(key.encode()).hexdigest(), 16) % 5 == 0


def tag_words(words: list[str], monosemous: dict[str, int]) -> list[str]:
    """BIO tags: greedy longest match (2 words, then 1) against monosemous lemmas."""
    tags = ["O"] * len(words)
    i = 0
    while i < len(words):
        for span in (2, 1):
            phrase = " ".join(words[i:i + span]).lower()
            if i + span <= len(words) and monosemous.get(phrase) in CATEGORIES:
                category = CATEGORIES[monosemous[phrase]]
                tags[i] = "B-" + category
                for j in range(i + 1, i + span):
                    tags[j] = "I-" + category
                i += span
                break
        else:
            i += 1
    return tags


def main(wordnet_dir: str, out_dir: str) -> None:
    src, out = Path(wordnet_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    synsets = []
    for name in ("noun", "verb", "adj", "adv"):
        synsets.extend(parse_data_file(src / f"data.{name}"))
    senses: dict[str, set[str]] = defaultdict(set)
    lexfile_of: dict[str, int] = {}
    for key, lexfile, _pos, lemmas, *_ in synsets:
        for lemma in lemmas:
            senses[lemma.lower()].add(key)
            lexfile_of[key] = lexfile
    monosemous = {w: lexfile_of[next(iter(s))] for w, s in senses.items() if len(s) == 1}

    by_lexfile: dict[int, list[str]] = defaultdict(list)
    cls_rows, tag_rows = [], []
    held: dict[int, list[tuple]] = defaultdict(list)  # held-out synsets per lexicographer file
    for key, lexfile, pos, lemmas, gloss, examples in synsets:
        if held_out(key):
            held[lexfile].append((key, lemmas, gloss, examples))
        if not held_out(key):
            text = f"{', '.join(lemmas)}: {gloss}."
            if examples:
                text += " " + " ".join(e.strip() + "." for e in examples)
            by_lexfile[lexfile].append(text)
            continue
        split = "validation" if held_out(key + "/split") else "train"
        if pos == "n" and lexfile in CATEGORIES:
            cls_rows.append({"sentence": gloss, "label": CATEGORIES[lexfile], "split": split})
        for sentence in [gloss, *examples]:
            words = WORD_RE.findall(sentence)
            tags = tag_words(words, monosemous)
            if 4 <= len(words) <= 48 and any(t != "O" for t in tags):
                tag_rows.append({"tokens": words, "ner_tags": tags, "split": split})

    documents = []
    for lexfile in sorted(by_lexfile):
        texts = by_lexfile[lexfile]
        documents += [" ".join(texts[i:i + 12]) for i in range(0, len(texts), 12)]
    write_jsonl(out / "corpus.jsonl.gz", [{"text": d} for d in documents])
    write_jsonl(out / "supersense_cls.jsonl.gz", cls_rows)
    write_jsonl(out / "supersense_tag.jsonl.gz", tag_rows)
    qa_rows = supersense_qa(tag_rows)
    retrieval_rows, definition_rows = usage_tasks(held)
    write_jsonl(out / "supersense_qa.jsonl.gz", qa_rows)
    write_jsonl(out / "usage_retrieval.jsonl.gz", retrieval_rows)
    write_jsonl(out / "definition_retrieval.jsonl.gz", definition_rows)
    print(f"{len(documents)} documents, {len(cls_rows)} classification rows, "
          f"{len(tag_rows)} tagging rows, {len(qa_rows)} QA rows, {len(retrieval_rows)} retrieval queries, "
          f"{len(definition_rows)} definition queries")


def entry(lemmas: list[str], gloss: str) -> str:
    """A dictionary entry as the pretraining corpus writes one."""
    return f"{', '.join(lemmas)}: {gloss}."


QUESTION_NOUNS = {"ANIMAL": "an animal", "ARTIFACT": "an artifact", "BODY": "a body part", "FOOD": "a food",
                  "LOCATION": "a location", "PERSON": "a person", "PLANT": "a plant", "SUBSTANCE": "a substance"}


def supersense_qa(tag_rows: list[dict], max_rows: int = 4000) -> list[dict]:
    """QA over the tagging sentences: contexts of two sentences of the same split, one question per
    context about one category (present: its spans are the gold answers; absent: no answer)."""
    import random

    rng = random.Random(0)
    rows = []
    by_split: dict[str, list[dict]] = defaultdict(list)
    for row in tag_rows:
        by_split[row["split"]].append(row)
    for split, sentences in sorted(by_split.items()):
        for number in range(0, len(sentences) - 1, 2):
            context, spans = "", defaultdict(list)  # category -> [(text, char offset)]
            for sentence in sentences[number:number + 2]:
                words, tags = sentence["tokens"], sentence["ner_tags"]
                for i, (word, tag) in enumerate(zip(words, tags)):
                    context += " " if context else ""
                    if tag.startswith("B-"):
                        end = i + 1
                        while end < len(tags) and tags[end] == "I-" + tag[2:]:
                            end += 1
                        spans[tag[2:]].append((" ".join(words[i:end]), len(context)))
                    context += word
            absent = sorted(set(QUESTION_NOUNS) - set(spans))
            if rng.random() < 1 / 4 and absent:
                category, answers = rng.choice(absent), []
            else:
                category = rng.choice(sorted(spans))
                answers = spans[category]
            rows.append({"id": f"{split}-{number}", "title": "wordnet-supersenses", "context": context,
                         "question": f"Which word names {QUESTION_NOUNS[category]}?",
                         "answers": {"text": [t for t, _ in answers], "answer_start": [o for _, o in answers]},
                         "split": split})
    return [rows[i] for i in sorted(rng.sample(range(len(rows)), min(max_rows, len(rows))))]


def usage_tasks(held: dict[int, list[tuple]], max_rows: int = 4000):
    """Retrieval rows from the held-out synsets' usage examples (see the module docstring).
    Neighbours in database order share a topic, so the other passages are near misses."""
    import random

    rng = random.Random(0)
    retrieval_rows, definition_rows = [], []
    for lexfile in sorted(held):
        group = held[lexfile]
        for i, (key, lemmas, gloss, examples) in enumerate(group):
            split = "validation" if held_out(key + "/split") else "train"
            if len(gloss.split()) >= 3:
                definition_rows.append({"query": f"what does {lemmas[0]} mean?", "answer": gloss})
            if not examples or len(group) < 9:
                continue
            question = examples[0].strip()
            neighbours = [group[j] for j in sorted(range(len(group)), key=lambda j: abs(j - i))[1:13]]
            passages = [(key, lemmas, gloss)] + [(k, names, g) for k, names, g, _ in rng.sample(neighbours, 7)]
            rng.shuffle(passages)
            retrieval_rows.append({
                "query_id": int(key[:-1]), "query": question, "query_type": "DESCRIPTION",
                "passages": {"is_selected": [int(k == key) for k, _, _ in passages],
                             "passage_text": [entry(names, g) for _, names, g in passages],
                             "url": [f"wordnet:{k}" for k, _, _ in passages]},
                "answers": [], "split": split,
            })
    # An even sample over every lexicographer file (the first 4,000 would all be adjectives).
    return tuple([rows[i] for i in sorted(rng.sample(range(len(rows)), min(max_rows, len(rows))))]
                 for rows in (retrieval_rows, definition_rows))


def write_jsonl(path: Path, rows: list[dict]) -> None:
    # mtime=0 keeps the gzip bytes reproducible from run to run.
    with gzip.GzipFile(path, "wb", mtime=0) as handle:
        for row in rows:
            handle.write((json.dumps(row) + "\n").encode())


if __name__ == "__main__":
    main(*sys.argv[1:3])
