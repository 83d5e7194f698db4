"""What scripts/debian_text_dataset.py and scripts/gcloud_text_dataset.py share.

Both write fastText's supervised format (`__label__<label> <text>` per line) with the same
preprocessing (fastText's own text-classification tutorial: lower-cased, with . ! ? , ' / ( )
separated into tokens), the same deterministic split (test when the MD5 of an item's key is
0 mod 10, about 10%) and the same output files (OUT_DIR/train.txt, test.txt, meta.json; the
training lines shuffled with a fixed seed, since fastText reads its input in file order).
"""

import hashlib
import json
import os
import random
import re

PUNCT = re.compile(r"([.!?,'/()])")


def tokenize(text):
    """The text lower-cased, the punctuation above separated, white space folded to one space."""
    text = PUNCT.sub(r" \1 ", text).lower()
    return " ".join(text.split())


def is_test(key):
    """True for the keys of the test set: md5(key) % 10 == 0."""
    return int(hashlib.md5(key.encode()).hexdigest()[:8], 16) % 10 == 0


def write_dataset(out_dir, train, test, meta, seed, names=("train.txt", "test.txt")):
    """Shuffles the train lines with `seed`, writes them and the test lines to `names` in
    out_dir, then meta.json."""
    random.Random(seed).shuffle(train)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, names[0]), "w") as f:
        f.writelines(train)
    with open(os.path.join(out_dir, names[1]), "w") as f:
        f.writelines(test)
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
