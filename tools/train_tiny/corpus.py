"""Corpus extraction, deterministic split and tokenizer training for the bundled tiny model.

Corpus: the King James Version of the Bible as shipped by Debian's `bible-kjv-text`
package (text data) and read through the `bible` program of the `bible-kjv` package.
The KJV text is in the public domain (see /usr/share/doc/bible-kjv-text/copyright).

Document = one chapter:  "<Book> <chapter>\n" followed by one verse per line (verse
numbers dropped), each line ending in "\n".
Split: chapter index i (0-based, canonical order, 1189 chapters) goes to validation
iff i % 20 == 19 (59 chapters, ~5%); everything else is training.
heldout.txt: the validation chapters, in order, joined by "\n" (so a blank line
separates chapters), taking whole chapters while the file stays <= 65536 bytes.
"""
import hashlib
import os
import re
import subprocess

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

BOS, EOS = "<|bos|>", "<|eos|>"
HELDOUT_MAX_BYTES = 65536
# sha256 of the raw dump of `bible -l 10000 Gen1:1-Rev22:21` from bible-kjv 4.38 (Debian 12)
EXPECTED_RAW_SHA256 = None  # filled in below after the first extraction; checked loosely


def dump_bible() -> str:
    try:
        out = subprocess.run(["bible", "-l", "10000", "Gen1:1-Rev22:21"], check=True,
                             capture_output=True, text=True, cwd="/tmp").stdout
    except FileNotFoundError:
        raise SystemExit("`bible` not found: apt-get install bible-kjv bible-kjv-text")
    return out


def parse_chapters(raw: str):
    chapters = []  # list of (title, [verses])
    verse_re = re.compile(r"^  (\d+) (.*)$")
    head_re = re.compile(r"^((?:[1-3] )?[A-Z][A-Za-z ]*) (\d+)$")
    for line in raw.split("\n"):
        if not line.strip():
            continue
        m = verse_re.match(line)
        if m:
            chapters[-1][1].append(m.group(2).strip())
            continue
        m = head_re.match(line)
        if m:
            chapters.append((line.strip(), []))
            continue
        raise ValueError(f"unexpected line in bible dump: {line!r}")
    return chapters


def chapter_text(ch) -> str:
    title, verses = ch
    return title + "\n" + "".join(v + "\n" for v in verses)


def build_corpus(workdir: str, heldout_path: str):
    """Returns (train_docs, val_docs, info). Writes work files and heldout.txt."""
    os.makedirs(workdir, exist_ok=True)
    raw = dump_bible()
    raw_sha = hashlib.sha256(raw.encode()).hexdigest()
    chapters = parse_chapters(raw)
    docs = [chapter_text(c) for c in chapters]
    train = [d for i, d in enumerate(docs) if i % 20 != 19]
    val = [d for i, d in enumerate(docs) if i % 20 == 19]
    held = []
    size = 0
    for d in val:
        add = len(d.encode()) + (1 if held else 0)
        if size + add > HELDOUT_MAX_BYTES:
            break
        held.append(d)
        size += add
    heldout = "\n".join(held)
    with open(os.path.join(workdir, "train.txt"), "w") as f:
        f.write("\n".join(train))
    with open(os.path.join(workdir, "val.txt"), "w") as f:
        f.write("\n".join(val))
    os.makedirs(os.path.dirname(heldout_path), exist_ok=True)
    with open(heldout_path, "w") as f:
        f.write(heldout)
    info = dict(raw_sha256=raw_sha, raw_bytes=len(raw.encode()), chapters=len(chapters),
                verses=sum(len(c[1]) for c in chapters),
                corpus_bytes=sum(len(d.encode()) for d in docs),
                train_chapters=len(train), train_bytes=sum(len(d.encode()) for d in train),
                val_chapters=len(val), val_bytes=sum(len(d.encode()) for d in val),
                heldout_chapters=len(held), heldout_bytes=len(heldout.encode()),
                heldout_sha256=hashlib.sha256(heldout.encode()).hexdigest())
    return train, val, info


def train_tokenizer(train_docs, vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2,
                                  special_tokens=[BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(train_docs, trainer=trainer, length=len(train_docs))
    bos_id, eos_id = tok.token_to_id(BOS), tok.token_to_id(EOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS}:1 $B:1",
        special_tokens=[(BOS, bos_id), (EOS, eos_id)])
    return tok
