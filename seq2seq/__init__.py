"""Attention translators: Bahdanau (RNNsearch) and the Transformer (Vaswani et al. 2017)."""
