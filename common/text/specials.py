"""The special tokens every vocabulary starts with, and their ids.

Kept apart from `vocabulary.py` (a `tf.Module`) so that model code written in `keras.ops`
can name the ids without importing TensorFlow, and so run on any Keras backend.
"""

PAD, START, END, UNK = "<pad>", "<start>", "<end>", "<unk>"
SPECIALS = (PAD, START, END, UNK)
PAD_ID, START_ID, END_ID, UNK_ID = range(4)
