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
    for key, lexfile, pos, lemmas, gloss, examples in synsets:
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
    print(f"{len(documents)} documents, {len(cls_rows)} classification rows, "
          f"{len(tag_rows)} tagging rows")


def write_jsonl(path: Path, rows: list[dict]) -> None:
    # mtime=0 keeps the gzip bytes reproducible from run to run.
    with gzip.GzipFile(path, "wb", mtime=0) as handle:
        for row in rows:
            handle.write((json.dumps(row) + "\n").encode())


if __name__ == "__main__":
    main(*sys.argv[1:3])
