"""What the captioner and the translators share: attention, decoding, text, training, metrics."""
